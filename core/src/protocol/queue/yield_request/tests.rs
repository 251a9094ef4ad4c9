//! Every decision of a yield request in the record: which grants it names, when it is written,
//! replaced and dropped, whom its `to` makes due, and what an older reader is told.

use super::*;
use crate::error::ErrorKind;
use crate::protocol::queue::tests::{entry, join, leave};
use crate::protocol::queue::Position;
use crate::protocol::queue::{
    classify, Change, Classified, Mode, QueueRecord, Scope, MAX_QUEUE_RECORD_LEN,
};

const MAX: usize = MAX_QUEUE_RECORD_LEN;

fn ask(by: &str, to: Option<&str>, reason: Option<&str>) -> YieldAsk {
    YieldAsk {
        by: by.into(),
        to: to.map(str::to_string),
        reason: reason.map(str::to_string),
    }
}

fn asked(r: &QueueRecord, a: YieldAsk) -> QueueRecord {
    r.apply(&Change::Yield(a), MAX, 0).unwrap().unwrap()
}

fn token(r: &QueueRecord, id: &str) -> u64 {
    r.find(id).and_then(|e| e.token).expect("granted")
}

/// `a` holds the whole lock; `b`, then `c`, wait to write it.
fn held_with_two_waiting() -> QueueRecord {
    let r = join(
        &QueueRecord::new(10, None),
        entry("a", Mode::Exclusive, Scope::Whole),
    );
    let r = join(&r, entry("b", Mode::Exclusive, Scope::Whole));
    join(&r, entry("c", Mode::Exclusive, Scope::Whole))
}

/// Readers of `x` and `y` hold; a writer of `x` waits.
fn two_readers_one_writer() -> QueueRecord {
    let p = |s| Scope::path(s).unwrap();
    let r = join(
        &QueueRecord::new(10, None),
        entry("rx", Mode::Shared, p("x")),
    );
    let r = join(&r, entry("ry", Mode::Shared, p("y")));
    join(&r, entry("wx", Mode::Exclusive, p("x")))
}

#[test]
fn a_request_names_the_grants_in_the_way_of_its_to_or_its_asker_else_every_grant() {
    let r = two_readers_one_writer();
    let (rx, ry) = (token(&r, "rx"), token(&r, "ry"));
    // A waiter asking for itself: only the grant in its way.
    let y = asked(&r, ask("wx", None, Some("deploy")));
    let req = y.yield_request.clone().unwrap();
    assert_eq!(req.tokens, vec![rx]);
    assert_eq!(
        (req.by.as_str(), req.reason.as_deref()),
        ("wx", Some("deploy"))
    );
    // An operator naming the waiter: the same grants.
    let y = asked(&r, ask("ops", Some("wx"), None));
    assert_eq!(y.yield_request.unwrap().tokens, vec![rx]);
    // An operator naming nobody: every grant, ascending.
    let y = asked(&r, ask("ops", None, None));
    assert_eq!(y.yield_request.unwrap().tokens, vec![rx, ry]);
    // The write changes no grant and no waiter.
    assert_eq!((y.grants, y.queue), (r.grants.clone(), r.queue.clone()));
    assert_eq!(y.epoch, r.epoch);
    assert_eq!(y.rev, r.rev + 1);
}

#[test]
fn nothing_is_written_when_nothing_is_in_the_way_or_the_same_request_stands() {
    // Nobody holds: nothing to ask.
    let empty = QueueRecord::new(10, None);
    assert_eq!(
        empty
            .apply(&Change::Yield(ask("ops", None, None)), MAX, 0)
            .unwrap(),
        None
    );
    // A waiter kept waiting only by an earlier waiter (no grant in its way): nothing.
    let p = |s| Scope::path(s).unwrap();
    let r = join(
        &QueueRecord::new(10, None),
        entry("a", Mode::Exclusive, p("a")),
    );
    let r = join(&r, entry("w", Mode::Exclusive, Scope::Whole));
    let r = join(&r, entry("b", Mode::Exclusive, p("b")));
    assert_eq!(r.waiting_ids(), vec!["w", "b"]);
    assert_eq!(
        r.apply(&Change::Yield(ask("b", None, None)), MAX, 0)
            .unwrap(),
        None
    );
    // The same request twice: written once (a retried write changes nothing).
    let r = held_with_two_waiting();
    let once = asked(&r, ask("ops", Some("c"), Some("why")));
    assert_eq!(
        once.apply(&Change::Yield(ask("ops", Some("c"), Some("why"))), MAX, 0)
            .unwrap(),
        None
    );
}

#[test]
fn bad_asks_are_refused_saying_what_to_do_and_nothing_is_written() {
    let r = held_with_two_waiting();
    let refused = |a: YieldAsk| r.apply(&Change::Yield(a), MAX, 0).unwrap_err();
    let e = refused(ask("ops", Some("zz"), None));
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("\"zz\""), "{e}");
    assert!(e.to_string().contains("lease status"), "{e}");
    // `to` names a holder, not a waiter.
    assert_eq!(
        refused(ask("ops", Some("a"), None)).kind(),
        ErrorKind::Invalid
    );
    assert_eq!(refused(ask("", None, None)).kind(), ErrorKind::Invalid);
    let long_by = "b".repeat(MAX_YIELD_BY_LEN + 1);
    assert_eq!(
        refused(ask(&long_by, None, None)).kind(),
        ErrorKind::Invalid
    );
    let long_reason = "r".repeat(MAX_YIELD_REASON_LEN + 1);
    let e = refused(ask("ops", None, Some(&long_reason)));
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("shorten"), "{e}");
    assert_eq!(
        refused(ask("ops", Some(""), None)).kind(),
        ErrorKind::Invalid
    );
    // A prefix of one waiter's id names it (the full id goes in the record); of two, refused.
    let y = asked(&r, ask("ops", Some("c"), None));
    assert_eq!(y.yield_request.unwrap().to.as_deref(), Some("c"));
    let two = join(&r, entry("cd", Mode::Exclusive, Scope::Whole));
    let two = join(&two, entry("ce", Mode::Exclusive, Scope::Whole));
    let y = asked(&two, ask("ops", Some("cd"), None));
    assert_eq!(y.yield_request.unwrap().to.as_deref(), Some("cd"));
    let e = two
        .apply(&Change::Yield(ask("ops", Some("cx"), None)), MAX, 0)
        .unwrap_err();
    assert!(e.to_string().contains("no participant"), "{e}");
    let long = join(&r, entry("d0123456789", Mode::Exclusive, Scope::Whole));
    let y = asked(&long, ask("ops", Some("d0123"), None));
    assert_eq!(y.yield_request.unwrap().to.as_deref(), Some("d0123456789"));
    let both = join(&long, entry("d0129999", Mode::Exclusive, Scope::Whole));
    let e = both
        .apply(&Change::Yield(ask("ops", Some("d012"), None)), MAX, 0)
        .unwrap_err();
    assert!(e.to_string().contains("more than one"), "{e}");
    // At the bounds: accepted.
    let by = "b".repeat(MAX_YIELD_BY_LEN);
    let reason = "r".repeat(MAX_YIELD_REASON_LEN);
    assert!(asked(&r, ask(&by, None, Some(&reason)))
        .yield_request
        .is_some());
}

#[test]
fn a_later_request_replaces_the_standing_one_keeping_the_tokens_still_granted() {
    let r = two_readers_one_writer();
    let (rx, ry) = (token(&r, "rx"), token(&r, "ry"));
    let first = asked(&r, ask("wx", None, Some("one")));
    let second = asked(&first, ask("ops", None, Some("two")));
    let req = second.yield_request.clone().unwrap();
    assert_eq!(req.tokens, vec![rx, ry]);
    assert_eq!(
        (req.by.as_str(), req.reason.as_deref()),
        ("ops", Some("two"))
    );
    // A request for `ry` alone after `rx` left keeps only what is still granted.
    let p = |s| Scope::path(s).unwrap();
    let r = join(&first, entry("wy", Mode::Exclusive, p("y")));
    let r = r
        .apply(&Change::Leave("rx".into()), MAX, 0)
        .unwrap()
        .unwrap();
    // `rx` left: its token was dropped, and with it the request (its only one).
    assert_eq!(r.yield_request, None);
    assert!(r.find("wx").unwrap().token.is_some());
    let r = asked(&r, ask("wy", None, None));
    assert_eq!(r.yield_request.unwrap().tokens, vec![ry]);
}

#[test]
fn the_write_that_removes_the_last_named_grant_drops_the_request() {
    let r = two_readers_one_writer();
    let (rx, ry) = (token(&r, "rx"), token(&r, "ry"));
    let y = asked(&r, ask("ops", None, None));
    // One of two named grants leaves: the other stays named.
    let one = leave(&y, "ry");
    assert_eq!(one.yield_request.as_ref().unwrap().tokens, vec![rx]);
    assert!(one.yield_for(ry).is_none());
    assert!(one.yield_for(rx).is_some());
    // The last: the request is gone in that write, which grants the writer.
    let none = leave(&one, "rx");
    assert_eq!(none.yield_request, None);
    assert_eq!(none.grants[0].id(), "wx");
    assert!(!String::from_utf8_lossy(&none.to_bytes()).contains("yield"));
}

#[test]
fn its_to_is_granted_next_by_the_holders_release_and_the_waiters_it_passes_count_it() {
    let r = held_with_two_waiting();
    let y = asked(&r, ask("ops", Some("c"), Some("deploy")));
    assert_eq!(y.requires, vec![YIELD_FEATURE.to_string()]);
    assert_eq!(y.yield_to(), Some("c"));
    // Due: first in the settling order, and `b` waits behind it.
    assert_eq!(y.order(), vec![1, 0]);
    let after = leave(&y, "a");
    assert_eq!(after.grants[0].id(), "c");
    assert_eq!(after.queue[0].id(), "b");
    // `b` was passed over once: counted as any bypass, so its bound still holds.
    assert_eq!(after.queue[0].passed, 1);
    assert_eq!(after.requires, vec!["priority".to_string()]);
    assert_eq!(after.yield_request, None);
    // Without `to`, the holder's release grants in the usual order.
    let plain = leave(&asked(&r, ask("ops", None, None)), "a");
    assert_eq!(plain.grants[0].id(), "b");
    assert!(plain.requires.is_empty());
}

#[test]
fn its_to_makes_no_earlier_waiter_of_its_priority_due_and_goes_after_one_due_already() {
    let r = held_with_two_waiting();
    let r = join(&r, entry("d", Mode::Exclusive, Scope::Whole));
    // `d` named: `b` and `c` (earlier, same priority) are not made due by it.
    let y = asked(&r, ask("ops", Some("d"), None));
    assert_eq!(y.order(), vec![2, 0, 1]);
    // A waiter due by its bypass count goes first, in arrival order, before the `to`.
    let mut due = y.clone();
    due.queue[1].passed = crate::protocol::queue::MAX_BYPASS;
    due.note_features();
    assert_eq!(
        due.order()[0],
        0,
        "c due makes b due (FIFO within a priority)"
    );
    assert_eq!(&due.order()[..3], &[0, 1, 2]);
}

#[test]
fn its_to_is_dropped_once_that_waiter_no_longer_waits() {
    let r = held_with_two_waiting();
    let y = asked(&r, ask("ops", Some("c"), None));
    // `c` gives up: the request stands for `a`, without `to` or the feature.
    let gone = leave(&y, "c");
    let req = gone.yield_request.clone().unwrap();
    assert_eq!((req.to, req.tokens), (None, vec![token(&r, "a")]));
    assert!(gone.requires.is_empty());
    assert_eq!(gone.yield_to(), None);
    // A `to` that no longer waits, while others do, hands over to nobody (a record written
    // by another writer that kept it).
    let mut kept = y.clone();
    kept.yield_request.as_mut().unwrap().to = Some("zz".into());
    assert_eq!(kept.yield_to(), None);
    assert_eq!(kept.order(), vec![0, 1]);
}

#[test]
fn a_record_with_a_request_is_read_by_this_version_and_refused_by_one_that_requires_more() {
    let r = held_with_two_waiting();
    let y = asked(&r, ask("ops", Some("c"), Some("r")));
    let bytes = y.to_bytes();
    let text = String::from_utf8_lossy(&bytes).to_string();
    assert!(text.contains(r#""requires":["yield"]"#), "{text}");
    assert!(
        text.contains(r#""yield":{"tokens":["#) && text.contains(r#""by":"ops","to":"c""#),
        "{text}"
    );
    assert_eq!(classify(&bytes), Classified::Queue(y));
    // A record without a request is byte for byte what it was.
    assert!(!String::from_utf8_lossy(&r.to_bytes()).contains("yield"));
    let newer = text.replace(r#"["yield"]"#, r#"["yield","later"]"#);
    assert_eq!(
        classify(newer.as_bytes()),
        Classified::Newer("feature \"later\"".into())
    );
}

#[test]
fn the_reserve_counts_the_request_so_a_request_that_leaves_no_room_is_refused() {
    let r = held_with_two_waiting();
    let reason = "r".repeat(MAX_YIELD_REASON_LEN);
    let a = ask("ops", Some("c"), Some(&reason));
    let with = r.changed(&Change::Yield(a.clone()), MAX).unwrap().unwrap();
    let needed = with.reserved_len();
    assert!(needed > r.reserved_len() + MAX_YIELD_REASON_LEN);
    assert!(r.changed(&Change::Yield(a.clone()), needed).is_ok());
    let full = r.changed(&Change::Yield(a), needed - 1).unwrap_err();
    assert_eq!(full.kind(), ErrorKind::QueueFull);
    assert!(full.to_string().contains("shorten the reason"), "{full}");
    assert!(Change::Yield(ask("x", None, None)).grows());
}

impl QueueRecord {
    fn waiting_ids(&self) -> Vec<&str> {
        self.queue.iter().map(|e| e.id()).collect()
    }
}

// A waiter's own request (`OwnAsk`, `LeaseOptions::ask_yield`): once per set of tenures in its
// way, never twice for one.

fn own(me: &str, reason: Option<&str>) -> YieldAsk {
    ask(me, Some(me), reason)
}

#[test]
fn a_waiter_asks_for_itself_once_it_waits_with_a_grant_in_its_way() {
    let mut o = OwnAsk::new(Some("deploy".into())).unwrap();
    let r = held_with_two_waiting();
    assert_eq!(o.decide(&r, "c"), Some(own("c", Some("deploy"))));
    // Written, its request names the holder and hands over to it.
    let y = asked(&r, own("c", Some("deploy")));
    assert_eq!(
        y.yield_request.as_ref().unwrap().tokens,
        vec![token(&r, "a")]
    );
    assert_eq!(y.yield_to(), Some("c"));
    // Read again, and again: it stands, nothing more to ask.
    assert_eq!(o.decide(&y, "c"), None);
    assert_eq!(o.decide(&y, "c"), None);
    // Its holder's release grants it, ahead of `b`.
    assert_eq!(leave(&y, "a").grants[0].id(), "c");
}

#[test]
fn a_waiter_not_waiting_in_the_record_asks_nothing() {
    let mut o = OwnAsk::new(None).unwrap();
    let r = held_with_two_waiting();
    // Not joined yet (or removed), and granted.
    assert_eq!(o.decide(&r, "d"), None);
    assert_eq!(o.decide(&r, "a"), None);
    // Nothing decided is remembered: once it waits, it asks.
    let r = join(&r, entry("d", Mode::Exclusive, Scope::Whole));
    assert_eq!(o.decide(&r, "d"), Some(own("d", None)));
}

#[test]
fn a_waiter_kept_waiting_by_an_earlier_waiter_and_no_grant_asks_nothing() {
    // `a` holds `x`; `b` waits for the whole lock; `c` wants `y` (no grant in its way) but
    // waits behind `b`, whom it competes with. Asking would name nobody.
    let p = |s| Scope::path(s).unwrap();
    let r = join(
        &QueueRecord::new(10, None),
        entry("a", Mode::Exclusive, p("x")),
    );
    let r = join(&r, entry("b", Mode::Exclusive, Scope::Whole));
    let r = join(&r, entry("c", Mode::Exclusive, p("y")));
    assert!(matches!(r.position("c"), Position::Waiting { .. }));
    let mut o = OwnAsk::new(None).unwrap();
    assert_eq!(o.decide(&r, "c"), None);
    assert_eq!(
        r.apply(&Change::Yield(own("c", None)), MAX, 0).unwrap(),
        None
    );
}

#[test]
fn a_waiter_does_not_ask_for_a_tenure_another_request_already_names() {
    let mut o = OwnAsk::new(None).unwrap();
    let r = asked(&held_with_two_waiting(), ask("ops", None, Some("drain")));
    assert_eq!(o.decide(&r, "c"), None);
}

#[test]
fn a_waiter_asks_when_a_grant_in_its_way_is_named_by_no_request() {
    // An operator asked for the writer of `x`: only `rx` is named. A writer of the whole lock
    // has `ry` in its way too, named by nobody: it asks (naming both).
    let r = two_readers_one_writer();
    let r = join(&r, entry("w", Mode::Exclusive, Scope::Whole));
    let r = asked(&r, ask("ops", Some("wx"), None));
    let mut o = OwnAsk::new(None).unwrap();
    assert_eq!(o.decide(&r, "w"), Some(own("w", None)));
    let y = asked(&r, own("w", None));
    let (rx, ry) = (token(&r, "rx"), token(&r, "ry"));
    assert_eq!(y.yield_request.unwrap().tokens, vec![rx, ry]);
}

#[test]
fn a_waiter_never_asks_twice_for_one_tenure_even_when_its_request_is_not_there() {
    let mut o = OwnAsk::new(None).unwrap();
    let r = held_with_two_waiting();
    assert!(o.decide(&r, "c").is_some());
    // Its write did not land (or a later record shows no request naming `a`): `a` was asked.
    assert_eq!(o.decide(&r, "c"), None);
}

#[test]
fn a_waiter_asks_again_when_a_later_holder_gets_in_its_way() {
    let mut o = OwnAsk::new(None).unwrap();
    let r = held_with_two_waiting();
    assert!(o.decide(&r, "c").is_some());
    let y = asked(&r, own("c", None));
    // An operator hands over to `b` instead: `a`'s release grants `b`, a tenure `c` never
    // asked and no request names.
    let y = asked(&y, ask("ops", Some("b"), None));
    let b = leave(&y, "a");
    assert_eq!(b.grants[0].id(), "b");
    assert_eq!(b.yield_request, None);
    assert_eq!(o.decide(&b, "c"), Some(own("c", None)));
    assert_eq!(o.decide(&asked(&b, own("c", None)), "c"), None);
    assert_eq!(o.decide(&b, "c"), None, "never twice for `b`'s tenure");
}

#[test]
fn a_waiters_reason_that_is_too_long_is_refused_before_it_asks() {
    let e = OwnAsk::new(Some("x".repeat(MAX_YIELD_REASON_LEN + 1))).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.to_string().contains("shorten it"), "{e}");
    assert!(OwnAsk::new(Some("x".repeat(MAX_YIELD_REASON_LEN))).is_ok());
}
