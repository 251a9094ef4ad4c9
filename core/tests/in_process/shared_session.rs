//! A shared session's driver (docs/protocol.md §10, "Shared sessions", issue 24) in simulated
//! time on the memory store: attach before join with one write for the attachments waiting,
//! one renewal write per interval whatever the number attached, a release that detaches one
//! and leaves the others, loss (deletion, lapse) reaching every attachment's own channel, and
//! close.

#![allow(clippy::disallowed_methods)]

use lease::clock::Clock;
use lease::protocol::session::Attached;
use lease::record::RecordState;
use lease::{ErrorKind, LostReason, SessionOptions, SharedSession};

use crate::sim;
use sim::*;

async fn open(w: &World) -> (SharedSession, lease::store::memory::MemoryStore) {
    let (c, conn) = w.client("a", 1);
    let s = SharedSession::open(&c, SessionOptions::new(TTL).label("shards"))
        .await
        .unwrap();
    (s, conn)
}

/// Two attachments, for `jobs/a` and `jobs/b`, each held by a landed session write.
async fn two_landed(s: &SharedSession) -> (lease::Attachment, lease::Attachment) {
    let mut a = s.attach("jobs/a").unwrap();
    let mut b = s.attach("jobs/b").unwrap();
    a.landed().await.unwrap();
    b.landed().await.unwrap();
    (a, b)
}

async fn attached(w: &World, s: &SharedSession) -> String {
    w.valid(s.key()).await.attached.unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_session_opens_at_its_own_key_held_in_its_own_id_with_nothing_attached() {
    let w = World::new();
    let (s, _) = open(&w).await;
    assert!(s.key().starts_with(".lease-sessions/"), "{}", s.key());
    assert_eq!(w.keys_under(".lease-sessions/"), vec![s.key().to_string()]);
    let r = w.valid(s.key()).await;
    assert_eq!(r.state, RecordState::Held);
    assert_eq!(r.holder.id, s.sid());
    assert_eq!(r.holder.label.as_deref(), Some("shards"));
    assert_eq!(r.attached.as_deref(), Some(""));
    assert!(s.is_alive());
}

#[tokio::test(start_paused = true)]
async fn attachments_wait_for_a_landed_write_and_those_waiting_together_share_one_write() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    conn.reset_stats();
    let mut a = s.attach("jobs/a").unwrap();
    let mut b = s.attach("jobs/b").unwrap();
    let mut c = s.attach("jobs/c").unwrap();
    // Not attached before a write holding them landed: no join may be sent yet.
    assert!(!a.believed() && !b.believed() && !c.believed());
    a.landed().await.unwrap();
    b.landed().await.unwrap();
    c.landed().await.unwrap();
    assert_eq!(
        conn.stats().puts,
        1,
        "one write for the three (a group commit)"
    );
    assert_eq!(attached(&w, &s).await, "1-3");
    assert_eq!(a.id(), format!("{}.1", s.sid()));
    assert!(a.believed() && b.believed() && c.believed());
    // A later one takes the next write, and the next number.
    let mut d = s.attach("jobs/d").unwrap();
    d.landed().await.unwrap();
    assert_eq!(d.number(), 4);
    assert_eq!(conn.stats().puts, 2);
    assert_eq!(attached(&w, &s).await, "1-4");
}

#[tokio::test(start_paused = true)]
async fn one_renewal_write_per_interval_whatever_the_number_attached() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let mut all = vec![];
    for i in 0..1000 {
        all.push(s.attach(&format!("shards/{i}")).unwrap());
    }
    for a in &mut all {
        a.landed().await.unwrap();
    }
    assert_eq!(attached(&w, &s).await, "1-1000");
    conn.reset_stats();
    // Three ttls: a renewal every ttl/3 (nine writes), whatever the number attached.
    sleep(TTL * 3).await;
    let puts = conn.stats().puts;
    assert!((8..=10).contains(&puts), "{puts} session writes in 3 ttls");
    assert_eq!(conn.stats().gets, 0, "renewals read nothing");
    assert!(all.iter().all(|a| a.believed()));
}

#[tokio::test(start_paused = true)]
async fn a_release_detaches_one_with_the_next_renewal_and_leaves_the_others_attached() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let (a, b) = two_landed(&s).await;
    conn.reset_stats();
    // Never joined: nothing to leave.
    a.release(false).await.unwrap();
    assert_eq!(
        conn.stats().puts,
        0,
        "a release makes no session write of its own"
    );
    assert_eq!(s.attached(), 1);
    sleep(TTL / 2).await;
    assert_eq!(
        attached(&w, &s).await,
        "2",
        "detached with the next renewal"
    );
    assert!(b.believed());
    assert!(s.is_alive());
    assert_eq!(b.lost_reason(), None);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_session_loses_every_attachment_each_through_its_own_channel() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let (a, b) = two_landed(&s).await;
    w.store.remove_raw(s.key());
    let (ra, rb) = tokio::join!(a.lost(), b.lost());
    assert_eq!(ra, LostReason::SessionDeleted);
    assert_eq!(rb, LostReason::SessionDeleted);
    assert_eq!(s.lost().await, LostReason::SessionDeleted);
    assert!(!a.believed() && !b.believed());
    // A lost session attaches nothing more: open another.
    let e = s.attach("jobs/c").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_session_that_cannot_renew_lapses_and_loses_every_attachment() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let (a, b) = two_landed(&s).await;
    conn.faults().set_unavailable(true);
    let start = w.now();
    assert_eq!(a.lost().await, LostReason::Expired);
    assert_eq!(b.lost().await, LostReason::Expired);
    // Not before the deadline (the last landed write's send + ttl), and never renewed again.
    assert!(w.now() - start >= TTL / 2, "lost early");
    assert!(!a.believed());
    conn.faults().set_unavailable(false);
    sleep(TTL).await;
    assert_eq!(
        w.valid(s.key()).await.attached.as_deref(),
        Some("1-2"),
        "a lapsed session is never written again"
    );
}

#[tokio::test(start_paused = true)]
async fn an_attachment_waiting_for_its_write_is_lost_with_the_session() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    conn.faults().set_unavailable(true);
    let mut a = s.attach("jobs/a").unwrap();
    let e = a.landed().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert_eq!(a.lost_reason(), Some(LostReason::Expired));
}

#[tokio::test(start_paused = true)]
async fn close_releases_every_attachment_then_releases_and_deletes_the_session() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let mut a = s.attach("jobs/a").unwrap();
    a.landed().await.unwrap();
    let key = s.key().to_string();
    s.close().await;
    assert!(w.record(&key).await.is_none(), "deleted");
    assert!(!a.believed());
    assert_eq!(a.lost_reason(), None, "closed, not lost");
    let e = s.attach("jobs/b").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
}

#[tokio::test(start_paused = true)]
async fn queued_locks_on_a_shared_session_are_granted_with_entries_that_name_it() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let b = s.acquire("jobs/b", &queued()).await.unwrap();
    assert!(a.is_held() && b.is_held());
    a.ensure_held().unwrap();
    assert_eq!(a.id(), format!("{}.1", s.sid()));
    assert_eq!(b.id(), format!("{}.2", s.sid()));
    let r = w.queue_record("jobs/a").await;
    assert_eq!(r.grants.len(), 1);
    assert_eq!(r.grants[0].id, a.id());
    assert_eq!(r.grants[0].session.as_deref(), Some(""));
    assert_eq!(r.requires, vec!["session".to_string()]);
    assert_eq!(r.grants[0].token, Some(a.epoch()));
    // No session of their own: the one shared session is the only one.
    assert_eq!(w.keys_under("jobs/"), vec!["jobs/a", "jobs/b"]);
    assert_eq!(attached(&w, &s).await, "1-2");
    // Held through renewals and confirmations: after three ttls, still held, and the writes
    // are the session's renewals only (the locks' records are read, 304 while unchanged).
    conn.reset_stats();
    sleep(TTL * 3).await;
    assert!(a.is_held() && b.is_held());
    let st = conn.stats();
    assert!((8..=10).contains(&st.puts), "{st:?}");
    assert!(
        st.gets >= 16,
        "each lock confirmed every renew interval: {st:?}"
    );
    // Per-grant data is the process's record: refused on a shared session.
    let e = s.acquire("jobs/c", &queued().data("x")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_grant_released_alone_hands_over_and_leaves_the_other_held() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let b = s.acquire("jobs/b", &queued()).await.unwrap();
    let (other, _) = w.client("b", 2);
    let waiter = spawn_acquire(&other, "jobs/a", queued());
    sleep(secs(0.5)).await;
    assert!(!waiter.is_finished());
    let released_at = w.now();
    a.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert_eq!(w.now(), released_at, "handed over in the releasing write");
    assert!(b.is_held());
    sleep(TTL / 2).await;
    assert_eq!(attached(&w, &s).await, "2");
    assert!(b.is_held() && next.is_held());
    assert_eq!(b.lost_reason(), None);
}

/// The writes to the lock at `key` since `w.store.record_writes()` (a leave is one).
fn writes_to(w: &World, key: &str) -> usize {
    w.store.write_log().iter().filter(|l| l.key == key).count()
}

/// `SharedGrant::release(&self)` as `Lease::release`: idempotent. A second call sends no
/// second leave and reports what the first did (released while held: `Ok`); the grant then
/// says it was released, not lost.
#[tokio::test(start_paused = true)]
async fn a_shared_grant_released_twice_sends_one_leave_and_reports_ok_both_times() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    w.store.record_writes();
    a.release().await.unwrap();
    assert_eq!(writes_to(&w, "jobs/a"), 1, "the leave");
    a.release().await.unwrap();
    assert_eq!(writes_to(&w, "jobs/a"), 1, "no second leave");
    assert!(!a.is_held());
    assert_eq!(a.lost_reason(), None, "released, not lost");
    let e = a.ensure_held().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert!(e.message().contains("was released"), "{e}");
    assert_eq!(s.attached(), 0);
}

/// A grant lost with its session before its release: the release still detaches it (as
/// today), and reports the loss as `Lost` with the loss's reason, the same error every time
/// (as `Lease::release` after a loss: whatever was done under it may have overlapped with
/// another holder); `lost_reason()` keeps answering after the release.
#[tokio::test(start_paused = true)]
async fn releasing_a_shared_grant_lost_with_its_session_reports_the_loss_every_time() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    w.store.remove_raw(s.key());
    assert_eq!(a.lost().await, LostReason::SessionDeleted);
    let expected = LostReason::SessionDeleted.error(a.url(), a.epoch());
    for call in ["first", "second"] {
        let e = a.release().await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Lost, "{call}: {e}");
        assert_eq!(e.message(), expected.message(), "{call}");
        assert_eq!(e.lease(), Some(a.url()), "{call}");
        assert_eq!(e.epoch(), Some(a.epoch()), "{call}");
    }
    assert_eq!(a.lost_reason(), Some(LostReason::SessionDeleted));
    let e = a.ensure_held().unwrap_err();
    assert_eq!(e.message(), expected.message());
    assert_eq!(s.attached(), 0);
}

/// A grant lost alone (its lock's record dropped it) reports that loss at its release.
#[tokio::test(start_paused = true)]
async fn releasing_a_shared_grant_its_lock_dropped_reports_that_loss() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let mut r = w.queue_record("jobs/a").await;
    r.grants.clear();
    r.requires.clear();
    r.rev += 1;
    w.store.overwrite_raw("jobs/a", r.to_bytes());
    let reason = a.lost().await;
    let e = a.release().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Lost, "{e}");
    assert_eq!(e.message(), reason.error(a.url(), a.epoch()).message());
    assert_eq!(a.lost_reason(), Some(reason));
}

/// Two releases of one grant at once (two threads of a binding): one leave is sent, and both
/// report the release once it is done — the second waits for the first's leave (a second
/// release that merely found the number released would return at once, before the leave
/// landed: the store answers slowly here so that the difference shows).
#[tokio::test(start_paused = true)]
async fn two_releases_of_a_shared_grant_racing_send_one_leave() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let (other, _) = w.client("b", 2);
    let waiter = spawn_acquire(&other, "jobs/a", queued());
    sleep(secs(0.5)).await;
    conn.faults().set_latency(secs(0.4));
    w.store.record_writes();
    // Each call's result, and the leaves landed when it returned.
    let release = || async { (a.release().await, writes_to(&w, "jobs/a")) };
    let ((one, landed_one), (two, landed_two)) = tokio::join!(release(), release());
    one.unwrap();
    two.unwrap();
    assert_eq!(
        (landed_one, landed_two),
        (1, 1),
        "each release returned once the one leave had landed"
    );
    conn.faults().set_latency(secs(0.0));
    let next = waiter.await.unwrap().unwrap();
    assert!(next.is_held());
    assert_eq!(
        writes_to(&w, "jobs/a"),
        1,
        "one leave, which granted the waiter"
    );
    assert_eq!(s.attached(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_lock_record_that_drops_one_grant_loses_that_grant_alone() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let b = s.acquire("jobs/b", &queued()).await.unwrap();
    // Replaced by hand with an empty queued lock: `a`'s grant is gone from it.
    let mut r = w.queue_record("jobs/a").await;
    r.grants.clear();
    r.requires.clear();
    r.rev += 1;
    w.store.overwrite_raw("jobs/a", r.to_bytes());
    let reason = a.lost().await;
    assert!(matches!(reason, LostReason::LockReplaced(_)), "{reason:?}");
    assert!(!a.is_held());
    assert!(b.is_held(), "the other grant stays held");
    assert!(s.is_alive());
    sleep(TTL / 2).await;
    assert_eq!(
        attached(&w, &s).await,
        "2",
        "the lost grant's number detached"
    );
}

#[tokio::test(start_paused = true)]
async fn a_holder_cut_off_loses_both_grants_and_a_waiter_takes_both_after_ttl_and_grace_without_overlap(
) {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let b = s.acquire("jobs/b", &queued()).await.unwrap();
    let (other, _) = w.client("b", 2);
    // Each side's moment, taken where it happens: the holder's loss, the waiter's grant.
    let when = |c: &lease::Client, key: &'static str| {
        let (c, clock) = (c.clone(), w.clock.clone());
        tokio::spawn(async move {
            let l = c.acquire(key, &queued()).await.unwrap();
            (l, clock.now())
        })
    };
    let lost_when = |g: lease::SharedGrant| {
        let clock = w.clock.clone();
        tokio::spawn(async move {
            let reason = g.lost().await;
            let at = clock.now();
            (g, reason, at)
        })
    };
    let (wa, wb) = (when(&other, "jobs/a"), when(&other, "jobs/b"));
    sleep(secs(0.5)).await;
    let (la, lb) = (lost_when(a), lost_when(b));
    // The holder is cut off from the store (a crash looks the same to the others).
    let cut = w.now();
    conn.faults().set_unavailable(true);
    let ((ga, ta), (gb, tb)) = (wa.await.unwrap(), wb.await.unwrap());
    let ((a, ra, lost_a), (b, rb, lost_b)) = (la.await.unwrap(), lb.await.unwrap());
    assert_eq!((ra, rb), (LostReason::Expired, LostReason::Expired));
    assert!(!a.is_held() && !b.is_held());
    // No overlap: the holder stopped believing each before the waiter was granted it.
    assert!(
        ta > lost_a,
        "a granted at {ta:?}, its holder lost it at {lost_a:?}"
    );
    assert!(
        tb > lost_b,
        "b granted at {tb:?}, its holder lost it at {lost_b:?}"
    );
    assert!(ga.is_held() && gb.is_held());
    assert!(ga.epoch() > a.epoch() && gb.epoch() > b.epoch());
    let taken_at = ta.max(tb);
    // Within ttl + grace of the last renewal, plus polls and the check's pacing.
    assert!(
        taken_at - cut <= TTL + GRACE + TTL,
        "took {:?}",
        taken_at - cut
    );
}

#[tokio::test(start_paused = true)]
async fn a_join_is_written_only_after_a_session_write_holding_its_number() {
    let w = World::new();
    let (s, _) = open(&w).await;
    w.store.record_writes();
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let log = w.store.write_log();
    let holds = |bytes: &[u8]| {
        let r: lease::record::Record = serde_json::from_slice(bytes).unwrap();
        let set = Attached::parse(r.attached.as_deref().unwrap()).unwrap();
        set.contains(1)
    };
    let attached_at = log
        .iter()
        .position(|l| l.key == s.key() && holds(&l.bytes))
        .expect("a session write holding number 1");
    let joined_at = log
        .iter()
        .position(|l| l.key == "jobs/a" && String::from_utf8_lossy(&l.bytes).contains(a.id()))
        .expect("the join");
    assert!(attached_at < joined_at, "joined before attached: {log:?}");
}

#[tokio::test(start_paused = true)]
async fn a_grant_dropped_without_release_is_released_in_the_background() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let b = s.acquire("jobs/b", &queued()).await.unwrap();
    let (other, _) = w.client("b", 2);
    let waiter = spawn_acquire(&other, "jobs/a", queued().wait(TTL * 3));
    sleep(secs(0.5)).await;
    assert!(!waiter.is_finished());
    drop(a);
    let next = waiter.await.unwrap().unwrap();
    assert!(next.is_held() && b.is_held());
    sleep(TTL / 2).await;
    assert_eq!(attached(&w, &s).await, "2");
}

#[tokio::test(start_paused = true)]
async fn a_request_that_gives_up_detaches_its_number_and_leaves_the_queue() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let (other, _) = w.client("b", 2);
    let held = other.acquire("jobs/a", &queued()).await.unwrap();
    let e = s
        .acquire("jobs/a", &queued().wait(secs(3.0)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(s.attached(), 0, "the number was released");
    let r = w.queue_record("jobs/a").await;
    assert!(r.queue.is_empty(), "left the queue: {r:?}");
    sleep(TTL / 2).await;
    assert_eq!(attached(&w, &s).await, "", "detached with the next renewal");
    held.release().await.unwrap();
}

/// Issue 24: one confirmation read at a time cannot keep many grants on a slow store. Here 40
/// grants at 400 ms a request would take 16 s a round, longer than the ttl (10 s), so each
/// grant's belief would lapse between two reads of its record. Reads run concurrently
/// (bounded), spread over the renew interval: every grant stays held.
#[tokio::test(start_paused = true)]
async fn many_grants_stay_held_on_a_store_slower_than_a_ttl_per_round_of_serial_reads() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let mut grants = Vec::new();
    for i in 0..40 {
        grants.push(s.acquire(&format!("jobs/{i}"), &queued()).await.unwrap());
    }
    conn.faults().set_latency(secs(0.4));
    for _ in 0..6 {
        sleep(TTL / 2).await;
        let held = grants.iter().filter(|g| g.is_held()).count();
        assert_eq!(held, grants.len(), "grants held at {:?}", w.now());
    }
    assert!(grants.iter().all(|g| g.lost_reason().is_none()));
}

/// A waiting acquisition through a shared session stops when cancelled: `Cancelled`, its
/// entry gone from the lock's record and its attachment from the session, so the holder's
/// release hands the lock to nobody behind it.
#[tokio::test(start_paused = true)]
async fn a_cancelled_acquisition_through_a_session_leaves_the_queue_and_the_session() {
    let w = World::new();
    let (other, _) = w.client("b", 2);
    let held = other.acquire("jobs/a", &queued()).await.unwrap();
    let (s, _) = open(&w).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let waiting = {
        let (s, cancel) = (s.clone(), cancel.clone());
        tokio::spawn(async move { s.acquire_with_cancel("jobs/a", &queued(), &cancel).await })
    };
    sleep(secs(1.0)).await;
    assert_eq!(w.queue_record("jobs/a").await.queue.len(), 1);
    cancel.cancel();
    let e = tokio::time::timeout(secs(5.0), waiting)
        .await
        .expect("the cancelled acquisition went on waiting")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Cancelled, "{e}");
    assert!(w.queue_record("jobs/a").await.queue.is_empty());
    sleep(TTL / 2).await;
    assert_eq!(s.attached(), 0);
    held.release().await.unwrap();
}

/// A shared grant fences as a lease does: its token names the grant's entry id `SID.N` as its
/// holder and parses back; its fenced write lands while it holds; after its holder is cut off
/// and the lock taken over, the new holder's fenced write refuses the old grant's next one.
#[tokio::test(start_paused = true)]
async fn a_shared_grants_fencing_token_names_its_entry_and_fences_it_out_after_a_takeover() {
    let w = World::new();
    let (s, conn) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let token = a.token();
    assert_eq!(
        token.to_string(),
        format!("{}#{}@{}", a.url(), a.epoch(), a.id())
    );
    assert_eq!(token.holder(), Some(a.id()));
    assert_eq!(
        token.to_string().parse::<lease::FencingToken>().unwrap(),
        token
    );
    assert_eq!(a.object_key("data").unwrap(), "jobs/data");
    a.fenced_put("data", "one").await.unwrap();

    // Cut off; another process is granted the lock after ttl + grace and writes.
    let (other, _) = w.client("b", 2);
    let waiter = spawn_acquire(&other, "jobs/a", queued());
    conn.faults().set_unavailable(true);
    let next = waiter.await.unwrap().unwrap();
    assert!(next.epoch() > a.epoch());
    next.fenced_put("data", "two").await.unwrap();

    // The old grant's process is back: its fenced write is refused, the data stays.
    conn.faults().set_unavailable(false);
    let e = a.fenced_put("data", "stale").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Fenced, "{e}");
    let now = next.fenced_get("data").await.unwrap().unwrap();
    assert_eq!(&now.bytes[..], b"two");
}

/// Issue 23 on a shared session: a waiter's yield request reaches the grant it names at the
/// session's next confirmation of that lock (not a loss), and no other grant of the session;
/// the grant's release then hands the lock to the waiter.
#[tokio::test(start_paused = true)]
async fn a_yield_request_reaches_the_shared_grant_it_names_and_no_other() {
    let w = World::new();
    let (s, _) = open(&w).await;
    let a = s.acquire("jobs/a", &queued()).await.unwrap();
    let b = s.acquire("jobs/b", &queued()).await.unwrap();
    assert_eq!(a.yield_requested(), None);
    let (other, _) = w.client("b", 2);
    let waiter = spawn_acquire(&other, "jobs/a", queued().ask_yield(Some("deploy")));
    let told = tokio::time::timeout(secs(20.0), a.yield_request())
        .await
        .expect("the grant was told");
    assert_eq!(told.reason.as_deref(), Some("deploy"));
    assert_eq!(a.yield_requested(), Some(told));
    assert!(
        a.is_held() && !waiter.is_finished(),
        "a request is not a loss"
    );
    sleep(TTL).await;
    assert_eq!(b.yield_requested(), None, "named by no request");
    a.release().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    assert!(next.is_held() && b.is_held());
}

/// Closing a session ends an acquisition still waiting through it (reported by the liblease
/// helper: it stayed in the lock's queue until the closed session was taken for lapsed, ttl +
/// grace later, then said "lapsed"): it leaves the queue at once, with `Invalid` saying the
/// session was closed, and close returns.
#[tokio::test(start_paused = true)]
async fn closing_a_session_ends_an_acquisition_waiting_through_it() {
    let w = World::new();
    let (other, _) = w.client("b", 2);
    let held = other.acquire("jobs/a", &queued()).await.unwrap();
    let (s, _) = open(&w).await;
    let waiting = {
        let s = s.clone();
        tokio::spawn(async move { s.acquire("jobs/a", &queued()).await })
    };
    sleep(secs(1.0)).await;
    assert_eq!(w.queue_record("jobs/a").await.queue.len(), 1);
    tokio::time::timeout(secs(5.0), s.close())
        .await
        .expect("close returned");
    let e = tokio::time::timeout(secs(5.0), waiting)
        .await
        .expect("the acquisition went on waiting after close")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.message().contains("closed"), "{e}");
    assert!(w.queue_record("jobs/a").await.queue.is_empty());
    held.release().await.unwrap();
}

/// What every binding's `open_session(url)` and `Session.acquire(lock)` take, decided once:
/// the session's store from a store URL, a directory or a lock URL; a lock by key, or by a URL
/// in the session's store; another store's lock, or a NUL, is `Invalid`.
#[test]
fn a_sessions_store_and_its_locks_are_named_by_url_or_key() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let mem = lease::session_store("memory://ns").unwrap();
    assert_eq!(mem, lease::session_store("memory://ns/jobs/7").unwrap());
    let file = lease::session_store(&format!("file://{d}")).unwrap();
    assert_eq!(file.to_string(), format!("file://{d}"));
    assert_eq!(
        lease::session_lock_key(&mem, "jobs/7", false).unwrap(),
        "jobs/7"
    );
    assert_eq!(
        lease::session_lock_key(&mem, "memory://ns/jobs/7", false).unwrap(),
        "jobs/7"
    );
    // A file URL's last name is the key, its directory the store.
    assert_eq!(
        lease::session_lock_key(&file, &format!("{d}/seven"), true).unwrap(),
        "seven"
    );
    assert!(lease::session_lock_key(&file, &format!("{d}/jobs/7"), true).is_err());
    let e = lease::session_lock_key(&mem, "memory://other/jobs/7", false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid);
    assert!(e.message().contains("not in this session's store"), "{e}");
    for bad in ["jobs/\0", "memory://ns/\0"] {
        let e = lease::session_lock_key(&mem, bad, false).unwrap_err();
        assert!(e.message().contains("NUL"), "{e}");
    }
    assert!(lease::session_store("memory://ns\0").is_err());
}
