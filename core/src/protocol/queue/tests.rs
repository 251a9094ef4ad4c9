use proptest::prelude::*;

use super::*;

const MAX: usize = MAX_QUEUE_RECORD_LEN;

// --- What the machines' tests share (waiter, holder, change).

/// The tests' origin of time.
#[allow(clippy::disallowed_methods)] // the tests' own origin
pub(super) fn t0() -> crate::clock::Instant {
    static T0: std::sync::OnceLock<crate::clock::Instant> = std::sync::OnceLock::new();
    *T0.get_or_init(crate::clock::Instant::now)
}

pub(super) fn secs(s: f64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(s)
}

/// Nonces `n`, no jitter.
pub(super) struct NoJitter;

impl crate::protocol::Entropy for NoJitter {
    fn nonce(&self) -> String {
        "n".into()
    }
    fn jitter(&self, d: std::time::Duration, _: f64) -> std::time::Duration {
        d
    }
}

/// A 10 s ttl (grace 1 s, renew 3.3 s), polls every second, a store clock of whole seconds.
pub(super) fn timing() -> crate::options::Timing {
    let caps = crate::store::Capabilities {
        conditional_delete: true,
        clock_resolution: secs(1.0),
        store_clock_rule: true,
        wall_clock: true,
        versions_are_unique: true,
    };
    crate::options::LeaseOptions::new(secs(10.0))
        .poll_interval(secs(1.0))
        .timing(&caps)
        .unwrap()
}

pub(super) fn version(n: u64) -> crate::store::Version {
    crate::store::Version {
        etag: format!("v{n}"),
        generation: Some(n),
    }
}

/// A read that found `bytes` at version `n`.
pub(super) fn found(bytes: &[u8], n: u64) -> crate::store::Get {
    crate::store::Get::Found(crate::store::Object {
        bytes: Some(bytes::Bytes::copy_from_slice(bytes)),
        size: bytes.len() as u64,
        version: version(n),
        last_modified: None,
        server_now: None,
        meta: Default::default(),
    })
}

pub(super) fn entry(id: &str, mode: Mode, scope: Scope) -> Entry {
    Entry {
        id: id.into(),
        mode,
        scope,
        ttl_ms: 30_000,
        token: None,
        session: None,
        wake: None,
        priority: 0,
        passed: 0,
    }
}

pub(super) fn join(r: &QueueRecord, e: Entry) -> QueueRecord {
    r.apply(&Change::Join(e), MAX, 0).unwrap().unwrap()
}

pub(super) fn leave(r: &QueueRecord, id: &str) -> QueueRecord {
    r.apply(&Change::Leave(id.into()), MAX, 0).unwrap().unwrap()
}

fn granted(r: &QueueRecord) -> Vec<&str> {
    r.grants.iter().map(Entry::id).collect()
}

fn waiting(r: &QueueRecord) -> Vec<&str> {
    r.queue.iter().map(Entry::id).collect()
}

/// Issue 22 item 1: what a `Create` carries grants nobody (`changed`); settling grants above
/// the record's epoch and above the floor (the writer's clock), then one by one.
#[test]
fn a_change_grants_nobody_until_settled_above_the_floor() {
    let r = QueueRecord::new(100, None);
    let made = r
        .changed(&Change::Join(entry("a", Mode::Shared, Scope::Whole)), MAX)
        .unwrap()
        .unwrap();
    let made = made
        .changed(&Change::Join(entry("b", Mode::Shared, Scope::Whole)), MAX)
        .unwrap()
        .unwrap();
    assert_eq!((granted(&made), waiting(&made)), (vec![], vec!["a", "b"]));
    assert_eq!((made.epoch, made.rev), (100, 2));
    let s = made.settled(5_000).unwrap();
    assert_eq!(granted(&s), vec!["a", "b"]);
    assert_eq!(s.grants[0].token, Some(5_001));
    assert_eq!(s.grants[1].token, Some(5_002));
    assert_eq!((s.epoch, s.rev), (5_002, 3));
    // A floor below the epoch: the epoch counts.
    let s = made.settled(7).unwrap();
    assert_eq!(s.grants[0].token, Some(101));
    // Nothing to grant: nothing to write, the epoch untouched.
    assert_eq!(s.settled(u64::MAX / 2), None);
    let mut unmoved = s.clone();
    unmoved.settle(u64::MAX / 2);
    assert_eq!(unmoved, s);
    // `apply` settles with the floor it is given.
    let j = r
        .apply(
            &Change::Join(entry("a", Mode::Shared, Scope::Whole)),
            MAX,
            900,
        )
        .unwrap()
        .unwrap();
    assert_eq!(j.grants[0].token, Some(901));
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
        Position::Waiting {
            ahead,
            competing,
            blockers,
        } => {
            assert_eq!((ahead, competing), (0, 0));
            let ids: Vec<_> = blockers.iter().map(Entry::id).collect();
            assert_eq!(ids, ["a", "b"]);
        }
        p => panic!("{p:?}"),
    }
    let r = join(&r, entry("e", Mode::Exclusive, range(120, 130)));
    // e overlaps c, which is waiting, and b: behind c, it checks c (and c checks a and b).
    match r.position("e") {
        Position::Waiting {
            ahead,
            competing,
            blockers,
        } => {
            assert_eq!((ahead, competing), (1, 1));
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
        r.apply(
            &Change::Join(entry("a", Mode::Shared, Scope::Whole)),
            MAX,
            0
        )
        .unwrap(),
        None
    );
    let r = leave(&r, "a");
    assert_eq!(r.apply(&Change::Leave("a".into()), MAX, 0).unwrap(), None);
    assert_eq!(r.apply(&Change::SetPermits(None), MAX, 0).unwrap(), None);
}

#[test]
fn records_round_trip_and_other_formats_are_not_queue_records() {
    let r = QueueRecord::new(7, Some(2));
    let r = join(&r, entry("a", Mode::Shared, Scope::path("x/y").unwrap()));
    let r = join(&r, entry("b", Mode::Exclusive, Scope::range(0, 9).unwrap()));
    let bytes = r.to_bytes();
    assert_eq!(classify(&bytes), Classified::Queue(r));
    assert_eq!(classify(br#"{"format":1,"epoch":3}"#), Classified::Other);
    assert_eq!(classify(br#"{"format":0}"#), Classified::Other);
    assert_eq!(classify(br#"{"epoch":3}"#), Classified::Other);
    assert_eq!(classify(b"garbage"), Classified::Other);
    assert!(matches!(
        classify(br#"{"format":2,"epoch":"x"}"#),
        Classified::Corrupt(_)
    ));
    let no_token =
        br#"{"format":2,"epoch":3,"rev":1,"grants":[{"id":"a","mode":"shared","ttl_ms":5}]}"#;
    assert!(matches!(classify(no_token), Classified::Corrupt(_)));
    let no_id = br#"{"format":2,"epoch":3,"rev":1,"queue":[{"id":"","ttl_ms":5}]}"#;
    assert!(matches!(classify(no_id), Classified::Corrupt(_)));
    let no_ttl = br#"{"format":2,"epoch":3,"rev":1,"queue":[{"id":"a","ttl_ms":0}]}"#;
    assert!(matches!(classify(no_ttl), Classified::Corrupt(_)));
    // An entry is only what deciding needs: an exclusive request over the whole lock is its
    // id and ttl.
    let one = join(
        &QueueRecord::new(7, None),
        entry("a", Mode::Exclusive, Scope::Whole),
    );
    assert_eq!(
        String::from_utf8(one.to_bytes().to_vec()).unwrap(),
        r#"{"format":2,"epoch":8,"rev":1,"grants":[{"id":"a","ttl_ms":30000,"token":8}],"queue":[]}"#
    );
}

/// The evolution rule (docs/protocol.md §10): what only a newer version writes — a newer
/// format, a required feature, a mode or a kind of scope this version does not know — is
/// `Newer`, never corrupt (so never taken over); other unknown fields are ignored.
#[test]
fn what_a_newer_version_writes_is_newer_not_corrupt() {
    let cases: [(&[u8], &str); 6] = [
        (br#"{"format":3}"#, "format 3"),
        (br#"{"format":7,"anything":[1]}"#, "format 7"),
        (
            br#"{"format":2,"epoch":1,"rev":1,"requires":["leases-v3"]}"#,
            "feature \"leases-v3\"",
        ),
        (
            br#"{"format":2,"epoch":1,"rev":1,"grants":[{"id":"a","mode":"intent","ttl_ms":5,"token":1}]}"#,
            "mode \"intent\"",
        ),
        (
            br#"{"format":2,"epoch":1,"rev":1,"queue":[{"id":"a","scope":{"glob":"*"},"ttl_ms":5}]}"#,
            "scope kind \"glob\"",
        ),
        (
            br#"{"format":2,"epoch":1,"rev":1,"queue":[{"id":"a","scope":"everything","ttl_ms":5}]}"#,
            "scope kind \"everything\"",
        ),
    ];
    for (bytes, what) in cases {
        assert_eq!(classify(bytes), Classified::Newer(what.into()));
    }
    let extra = br#"{"format":2,"epoch":1,"rev":1,"note":"hi","queue":[{"id":"a","ttl_ms":5,"since":"x"}]}"#;
    assert!(matches!(classify(extra), Classified::Queue(_)));
    // The whole lock written as a string, as this version writes it, is not a newer kind.
    let whole =
        br#"{"format":2,"epoch":1,"rev":1,"queue":[{"id":"a","scope":"whole","ttl_ms":5}]}"#;
    assert!(matches!(classify(whole), Classified::Queue(_)));
    let e = newer_error("file:///l", "mode \"intent\"");
    assert_eq!(e.kind(), ErrorKind::Unsupported);
    assert!(e.to_string().contains("newer version") && e.to_string().contains("intent"));
}

const SID: &str = "0123456789abcdef0123456789abcdef";

/// An entry attached to the shared session `SID` under `prefix`, numbered `n`.
fn shared_entry(n: u64, prefix: &str) -> Entry {
    Entry {
        session: Some(prefix.into()),
        ..entry(&format!("{SID}.{n}"), Mode::Exclusive, Scope::Whole)
    }
}

/// Shared sessions (docs/protocol.md §10, issue 24): an attached entry names its session by one
/// field and its id; the record requires `session` exactly while it lists one, so an older
/// version refuses it then and may use the lock again once none is listed.
#[test]
fn a_shared_entry_names_its_session_and_the_record_requires_it_exactly() {
    let a = shared_entry(1, "");
    let b = shared_entry(2, "team-a/");
    assert_eq!(a.session_key("locks/x"), format!(".lease-sessions/{SID}"));
    assert_eq!(
        b.session_key("locks/x"),
        format!("team-a/.lease-sessions/{SID}")
    );
    assert_eq!(a.shared().map(|s| s.n), Some(1));
    assert_eq!(a.session_holder(), SID);
    let own = entry("c", Mode::Exclusive, Scope::Whole);
    assert_eq!(own.session_key("locks/x"), "locks/x.q/c");
    assert_eq!(own.shared(), None);
    assert_eq!(own.session_holder(), "c");

    let r = join(&QueueRecord::new(0, None), own.clone());
    assert!(r.requires.is_empty());
    let r = join(&r, a.clone());
    assert_eq!(r.requires, [SESSION_FEATURE]);
    let r = join(&r, b.clone());
    assert_eq!(r.requires, [SESSION_FEATURE]);
    let bytes = r.to_bytes();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(text.contains(r#""requires":["session"]"#), "{text}");
    assert!(
        text.contains(&format!(
            r#"{{"id":"{SID}.1","ttl_ms":30000,"session":""}}"#
        )),
        "{text}"
    );
    assert_eq!(classify(&bytes), Classified::Queue(r.clone()));
    // Granted and settled, it still requires it; the last attached entry's leave drops it.
    let r = r.settled(0).unwrap_or(r);
    assert_eq!(r.requires, [SESSION_FEATURE]);
    let r = leave(&r, a.id());
    assert_eq!(r.requires, [SESSION_FEATURE]);
    let r = leave(&r, b.id());
    assert!(r.requires.is_empty(), "{:?}", r.requires);
    assert_eq!(r.queue.len() + r.grants.len(), 1);
    // Kept exact also when a record required it without an attached entry left.
    let mut stale = join(&QueueRecord::new(0, None), own.clone());
    stale.requires = vec![SESSION_FEATURE.into()];
    let r = join(&stale, entry("d", Mode::Shared, Scope::Whole));
    assert!(r.requires.is_empty());
}

/// A version that does not know shared sessions refuses a record that lists one (it would check
/// `KEY.q/ID` and remove a live grant); this one refuses as corrupt an attached entry no version
/// writes, so a crafted record cannot steer a checker to an arbitrary key.
#[test]
fn a_shared_entry_no_version_writes_is_corrupt() {
    let before = r#"{"format":2,"epoch":1,"rev":1,"requires":["sessions-v9"]}"#;
    assert_eq!(
        classify(before.as_bytes()),
        Classified::Newer("feature \"sessions-v9\"".into())
    );
    let record = |requires: &str, entry: &str| {
        format!(r#"{{"format":2,"epoch":1,"rev":1,{requires}"queue":[{entry}]}}"#)
    };
    let good = format!(r#"{{"id":"{SID}.3","ttl_ms":5,"session":"a/"}}"#);
    assert!(matches!(
        classify(record(r#""requires":["session"],"#, &good).as_bytes()),
        Classified::Queue(_)
    ));
    for (requires, entry) in [
        // Not required: an older version would not refuse it.
        ("", good.clone()),
        // Not a prefix, or not an id of a shared session.
        (
            r#""requires":["session"],"#,
            format!(r#"{{"id":"{SID}.3","ttl_ms":5,"session":"a"}}"#),
        ),
        (
            r#""requires":["session"],"#,
            format!(
                r#"{{"id":"{SID}.3","ttl_ms":5,"session":"{}/"}}"#,
                "a".repeat(1024)
            ),
        ),
        (
            r#""requires":["session"],"#,
            r#"{"id":"me","ttl_ms":5,"session":""}"#.to_string(),
        ),
        (
            r#""requires":["session"],"#,
            format!(r#"{{"id":"{SID}.0","ttl_ms":5,"session":""}}"#),
        ),
    ] {
        let bytes = record(requires, &entry);
        assert!(
            matches!(classify(bytes.as_bytes()), Classified::Corrupt(_)),
            "{bytes}"
        );
    }
    // A grant too, not only a waiter.
    let grant = format!(
        r#"{{"format":2,"epoch":1,"rev":1,"grants":[{{"id":"{SID}.3","ttl_ms":5,"token":1,"session":"a"}}],"requires":["session"]}}"#
    );
    assert!(matches!(classify(grant.as_bytes()), Classified::Corrupt(_)));
}

/// Capacity: a join is refused up front, with the limit, once the record could not hold every
/// participant granted; then every change that does not join fits, whatever order the waiters
/// are granted and leave in.
#[test]
fn a_full_queue_refuses_joins_and_every_other_change_fits() {
    let max = 4096;
    let mut r = QueueRecord::new(0, None);
    r = r
        .apply(
            &Change::Join(entry("holder", Mode::Exclusive, Scope::Whole)),
            max,
            0,
        )
        .unwrap()
        .unwrap();
    let mut n = 0;
    let e = loop {
        let e = entry(
            &format!("{n:032}"),
            Mode::Shared,
            Scope::path(&format!("p/{n}")).unwrap(),
        );
        match r.apply(&Change::Join(e), max, 0) {
            Ok(next) => r = next.unwrap(),
            Err(e) => break e,
        }
        n += 1;
        assert!(n < 1000, "never full");
    };
    assert_eq!(e.kind(), ErrorKind::QueueFull);
    assert!(e.to_string().contains("4096-byte limit"), "{e}");
    assert!(r.reserved_len() <= max);
    // The holder leaves: every waiter is granted in one write, which fits.
    let settled = leave(&r, "holder");
    assert_eq!(settled.queue.len(), 0);
    assert!(
        settled.to_bytes().len() <= max,
        "{}",
        settled.to_bytes().len()
    );
    // And so do permits set at their largest, and every leave after.
    let mut s = settled
        .apply(&Change::SetPermits(Some(u32::MAX)), max, 0)
        .unwrap()
        .unwrap();
    assert!(s.to_bytes().len() <= max);
    while let Some(g) = s.grants.first().cloned() {
        s = leave(&s, g.id());
        assert!(s.to_bytes().len() <= max);
    }
}

/// The record's size per participant (docs/benchmarks.md "Capacity"): the entries of a
/// semaphore's waiters, whatever their labels and data (which live in their sessions).
#[test]
fn a_thousand_waiters_fit_in_a_record() {
    let mut r = QueueRecord::new(1_767_225_600_000, Some(10));
    let mut sizes = vec![];
    for i in 0..1000 {
        let id = format!("{i:032x}");
        r = join(&r, entry(&id, Mode::Shared, Scope::Whole));
        if [10, 100, 1000].contains(&(i + 1)) {
            sizes.push((i + 1, r.to_bytes().len(), r.reserved_len()));
        }
    }
    for (n, len, reserved) in &sizes {
        eprintln!(
            "{n} participants: {len} bytes ({} per entry), {reserved} reserved",
            len / n
        );
    }
    let (_, len, reserved) = sizes[2];
    assert!(len < 100_000, "{len} bytes for 1,000 waiters");
    assert!(reserved <= MAX_QUEUE_RECORD_LEN, "{reserved} reserved");
    assert_eq!(granted(&r).len(), 10);
}

#[test]
fn a_record_made_again_keeps_its_participants_above_the_floor() {
    let r = join(
        &QueueRecord::new(5, Some(2)),
        entry("a", Mode::Shared, Scope::Whole),
    );
    let r = join(&r, entry("b", Mode::Shared, Scope::Whole));
    let r = join(&r, entry("c", Mode::Shared, Scope::Whole));
    let again = r.restored(1000);
    assert_eq!((again.epoch, again.rev), (1000, r.rev + 1));
    assert_eq!(
        (again.grants.clone(), again.queue.clone()),
        (r.grants.clone(), r.queue.clone())
    );
    let again = join(&again, entry("d", Mode::Shared, Scope::Whole));
    let again = leave(&again, "a");
    assert_eq!(again.position("c"), Position::Granted { token: 1001 });
    // A floor below the record's epoch keeps the epoch.
    assert_eq!(r.restored(1).epoch, r.epoch);
}

#[test]
fn permits_can_be_changed_while_participants_hold_and_wait() {
    let mut r = QueueRecord::new(0, Some(1));
    for id in ["a", "b", "c"] {
        r = join(&r, entry(id, Mode::Shared, Scope::Whole));
    }
    assert_eq!(granted(&r), ["a"]);
    // More permits grant the waiters at once; fewer keep the grants made and grant no more.
    let more = r
        .apply(&Change::SetPermits(Some(3)), MAX, 0)
        .unwrap()
        .unwrap();
    assert_eq!(granted(&more), ["a", "b", "c"]);
    let fewer = more
        .apply(&Change::SetPermits(Some(1)), MAX, 0)
        .unwrap()
        .unwrap();
    assert_eq!(granted(&fewer), ["a", "b", "c"]);
    let fewer = join(&fewer, entry("d", Mode::Shared, Scope::Whole));
    let fewer = leave(&fewer, "a");
    assert_eq!(waiting(&fewer), ["d"]);
    let none = fewer
        .apply(&Change::SetPermits(None), MAX, 0)
        .unwrap()
        .unwrap();
    assert_eq!(granted(&none), ["b", "c", "d"]);
    let e = r.check_permits("file:///l", Some(2)).unwrap_err();
    assert!(e.to_string().contains("lease permits file:///l N"), "{e}");
    assert!(Change::Join(entry("x", Mode::Shared, Scope::Whole)).grows());
    assert!(!Change::Leave("x".into()).grows());
    assert!(!Change::SetPermits(None).grows());
}

#[test]
fn who_is_in_the_way_of_a_request() {
    let r = QueueRecord::new(0, Some(2));
    let r = join(&r, entry("a", Mode::Shared, Scope::path("x").unwrap()));
    let r = join(&r, entry("b", Mode::Shared, Scope::path("y").unwrap()));
    let ids = |v: Vec<&Entry>| {
        v.into_iter()
            .map(Entry::id)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    // With permits, every overlapping grant takes one.
    assert_eq!(
        ids(r.in_the_way(&entry("c", Mode::Shared, Scope::path("x/1").unwrap()))),
        ["a"]
    );
    assert_eq!(
        ids(r.in_the_way(&entry("c", Mode::Shared, Scope::Whole))),
        ["a", "b"]
    );
    let r = QueueRecord::new(0, None);
    let r = join(&r, entry("a", Mode::Shared, Scope::Whole));
    assert!(r
        .in_the_way(&entry("c", Mode::Shared, Scope::Whole))
        .is_empty());
    assert_eq!(
        ids(r.in_the_way(&entry("c", Mode::Exclusive, Scope::Whole))),
        ["a"]
    );
    assert_eq!(session_key("locks/gc", "ab12"), "locks/gc.q/ab12");
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
            no_conflicting_grants(&r)?;
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

/// The capacity check's boundary: a join whose reserved length is exactly the limit fits; one
/// byte less of room refuses it.
#[test]
fn a_join_that_reserves_exactly_the_limit_fits() {
    let r = QueueRecord::new(0, None);
    let e = entry("a", Mode::Exclusive, Scope::Whole);
    let needed = {
        let mut with = r.clone();
        with.queue.push(e.clone());
        with.reserved_len()
    };
    assert!(r
        .changed(&Change::Join(e.clone()), needed)
        .unwrap()
        .is_some());
    let full = r.changed(&Change::Join(e), needed - 1).unwrap_err();
    assert_eq!(full.kind(), ErrorKind::QueueFull);
}

/// Who competes with whom, term by term: overlapping scopes and either side exclusive, or any
/// two overlapping requests of a semaphore; readers of a plain lock never delay each other, and
/// disjoint scopes never compete.
#[test]
fn competing_requests_overlap_and_one_is_exclusive_or_takes_a_permit() {
    let plain = QueueRecord::new(0, None);
    let semaphore = QueueRecord::new(0, Some(2));
    let path = |p: &str| Scope::path(p).unwrap();
    let x = |s: Scope| entry("x", Mode::Exclusive, s);
    let r = |s: Scope| entry("r", Mode::Shared, s);
    // Overlapping (a path and one below it).
    assert!(plain.competes(&x(path("a")), &r(path("a/b"))));
    assert!(plain.competes(&r(path("a")), &x(path("a/b"))));
    assert!(plain.competes(&x(path("a")), &x(path("a"))));
    assert!(!plain.competes(&r(path("a")), &r(path("a/b"))));
    assert!(semaphore.competes(&r(path("a")), &r(path("a/b"))));
    // Disjoint.
    assert!(!plain.competes(&x(path("a")), &x(path("b"))));
    assert!(!semaphore.competes(&r(path("a")), &r(path("b"))));
}

/// Wake hints (issue 23): whom a landed write wakes is a pure function of the record before and
/// after it — the grants it added, never those already there, never a waiter still waiting.
#[test]
fn a_write_hints_exactly_the_participants_it_newly_granted() {
    let held = join(
        &QueueRecord::new(0, None),
        entry("w1", Mode::Exclusive, Scope::Whole),
    );
    let mut r = join(&held, entry("r1", Mode::Shared, Scope::Whole));
    r = join(&r, entry("r2", Mode::Shared, Scope::Whole));
    r = join(&r, entry("w2", Mode::Exclusive, Scope::Whole));
    assert!(r.newly_granted(Some(&r)).is_empty(), "nothing changed");
    let left = r
        .apply(&Change::Leave("w1".into()), MAX, 0)
        .unwrap()
        .unwrap();
    let ids: Vec<&str> = left
        .newly_granted(Some(&r))
        .iter()
        .map(|e| e.id())
        .collect();
    assert_eq!(ids, ["r1", "r2"], "the readers, not the writer behind them");
    // Without a record before, everything the record grants.
    let all: Vec<&str> = left.newly_granted(None).iter().map(|e| e.id()).collect();
    assert_eq!(all, ["r1", "r2"]);
    // A reader leaving grants nobody new while the other reads.
    let one_left = left
        .apply(&Change::Leave("r1".into()), MAX, 0)
        .unwrap()
        .unwrap();
    assert!(one_left.newly_granted(Some(&left)).is_empty());
}

/// A wake address is part of the entry: it survives the grant, and every size bound counts it.
#[test]
fn a_wake_address_is_kept_through_the_grant_and_counted_in_the_reserve() {
    let wake = "udp:127.0.0.1:40123".to_string();
    let e = Entry {
        wake: Some(wake.clone()),
        priority: 0,
        passed: 0,
        ..entry("me", Mode::Exclusive, Scope::Whole)
    };
    let granted = join(&QueueRecord::new(0, None), e.clone());
    assert_eq!(granted.grants[0].wake.as_deref(), Some(wake.as_str()));
    assert_eq!(granted.grants[0].wake_hint(), Some(wake.as_str()));
    let bytes = String::from_utf8(granted.to_bytes().to_vec()).unwrap();
    assert!(bytes.contains(r#""wake":"udp:127.0.0.1:40123""#), "{bytes}");
    let plain = join(
        &QueueRecord::new(0, None),
        entry("me", Mode::Exclusive, Scope::Whole),
    );
    assert!(!String::from_utf8(plain.to_bytes().to_vec())
        .unwrap()
        .contains("wake"));
    let field = r#","wake":"udp:127.0.0.1:40123""#.len();
    assert_eq!(granted.reserved_len(), plain.reserved_len() + field);
    // A join refused for its address's bytes: the reserve counts them.
    let base = QueueRecord::new(0, None);
    let with = base.changed(&Change::Join(e), MAX).unwrap().unwrap();
    let limit = with.reserved_len() - 1;
    let e2 = Entry {
        wake: Some(wake),
        priority: 0,
        passed: 0,
        ..entry("me", Mode::Exclusive, Scope::Whole)
    };
    let err = base.changed(&Change::Join(e2), limit).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::QueueFull);
    assert!(base
        .changed(
            &Change::Join(entry("me", Mode::Exclusive, Scope::Whole)),
            limit
        )
        .is_ok());
}

/// An address longer than this version writes is never hinted (a record is input: whoever
/// wrote it, a hint goes only where this version would have sent one).
#[test]
fn an_over_long_wake_address_is_ignored() {
    let at_limit = format!("udp:{}", "1".repeat(MAX_WAKE_LEN - 4));
    let e = |w: &str| Entry {
        wake: Some(w.to_string()),
        priority: 0,
        passed: 0,
        ..entry("x", Mode::Exclusive, Scope::Whole)
    };
    assert_eq!(e(&at_limit).wake_hint(), Some(at_limit.as_str()));
    assert_eq!(e(&format!("{at_limit}1")).wake_hint(), None);
    assert_eq!(entry("x", Mode::Exclusive, Scope::Whole).wake_hint(), None);
    // An older reader's record (no field) and a newer one's (the field) both parse.
    let r = join(&QueueRecord::new(0, None), e("udp:[::1]:9"));
    assert!(matches!(classify(&r.to_bytes()), Classified::Queue(q) if q == r));
}

mod preemption;
mod priority;

/// No two grants of `r` conflict (overlapping scopes, one of them exclusive).
fn no_conflicting_grants(r: &QueueRecord) -> Result<(), TestCaseError> {
    for (i, a) in r.grants.iter().enumerate() {
        for b in &r.grants[i + 1..] {
            let conflict = a.scope.overlaps(&b.scope)
                && (a.mode == Mode::Exclusive || b.mode == Mode::Exclusive);
            prop_assert!(!conflict, "{:?} and {:?} granted together", a, b);
        }
    }
    Ok(())
}
