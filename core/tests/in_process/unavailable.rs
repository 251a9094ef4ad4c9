//! An acquire when the store, not a holder, is in the way.
//!
//! - `wait` bounds the acquire whatever the cause: it returns within the wait plus one request
//!   timeout, `Unavailable` when the store was what kept it (`Timeout` for a holder);
//!   `wait(0)` / `try_acquire` within one request timeout.
//! - Waiting forever is for a holder. A store unavailable for the whole unavailable timeout
//!   (default: the ttl, at least 10 s) in a row ends the acquire with `Unavailable`; a shorter
//!   outage does not.
//!
//! First in simulated time (the memory store's faults), then against real unreachable
//! endpoints on 127.0.0.1: a closed port (connection refused at once) and a listener that
//! accepts connections and never answers (every request hangs until its timeout).

#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use lease::options::default_unavailable_timeout;
use lease::ErrorKind;

use crate::sim;
use sim::*;

/// The request timeout of `opts()` (ttl 10 s: renew every 10/3 s, half of that per request),
/// and the millisecond tokio's timer may round a sleep up to.
fn request_timeout() -> Duration {
    TTL / 3 / 2 + Duration::from_millis(2)
}

/// An unreachable store two ways: every call fails at once (connection refused), or every
/// call hangs until its request timeout (packets dropped).
#[derive(Debug, Clone, Copy)]
enum Outage {
    Refused,
    Hanging,
}

fn cut_off(conn: &lease::store::memory::MemoryStore, outage: Outage) {
    match outage {
        Outage::Refused => conn.faults().set_unavailable(true),
        Outage::Hanging => conn.faults().set_latency(Duration::from_secs(3600)),
    }
}

fn assert_reads_as_unavailable(e: &lease::Error) {
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("unavailable"), "{e}");
    assert!(
        !e.to_string().contains("outcome of"),
        "a failed read talks of a write: {e}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_wait_bounds_the_acquire_whatever_is_in_the_way() {
    for outage in [Outage::Refused, Outage::Hanging] {
        for wait in [secs(0.0), secs(2.0), secs(5.0), secs(30.0)] {
            let w = World::new();
            let (a, conn) = w.client("a", 1);
            cut_off(&conn, outage);
            let start = w.now();
            let e = tokio::time::timeout(secs(3600.0), a.acquire("job", &opts().wait(wait)))
                .await
                .unwrap_or_else(|_| panic!("{outage:?}, wait {wait:?}: still trying after 1 h"))
                .unwrap_err();
            let took = w.now() - start;
            assert_reads_as_unavailable(&e);
            // The unavailable timeout (10 s) ends a 30 s wait first.
            let bound = wait.min(default_unavailable_timeout(TTL)) + request_timeout();
            assert!(
                took <= bound,
                "{outage:?}: wait {wait:?} returned after {took:?}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn try_acquire_on_an_unavailable_store_returns_within_one_request_timeout() {
    for outage in [Outage::Refused, Outage::Hanging] {
        let w = World::new();
        let (a, conn) = w.client("a", 1);
        cut_off(&conn, outage);
        let start = w.now();
        let e = a.try_acquire("job", &opts()).await.unwrap_err();
        assert_reads_as_unavailable(&e);
        let took = w.now() - start;
        assert!(took <= request_timeout(), "{outage:?}: {took:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn waiting_forever_gives_up_on_a_store_unavailable_for_the_whole_timeout() {
    for (outage, timeout) in [
        (Outage::Refused, None),
        (Outage::Hanging, None),
        (Outage::Refused, Some(secs(3.0))),
        (Outage::Hanging, Some(secs(60.0))),
    ] {
        let w = World::new();
        let (a, conn) = w.client("a", 1);
        cut_off(&conn, outage);
        let mut o = opts();
        o.unavailable_timeout = timeout;
        let start = w.now();
        let e = tokio::time::timeout(secs(3600.0), a.acquire("job", &o))
            .await
            .unwrap_or_else(|_| panic!("{outage:?}: waited an hour for a dead store"))
            .unwrap_err();
        let took = w.now() - start;
        assert_reads_as_unavailable(&e);
        // Default: max(ttl, 10 s) = 10 s here, plus at most one request in flight.
        let budget = timeout.unwrap_or(secs(10.0));
        assert!(
            took >= budget && took <= budget + request_timeout(),
            "{outage:?}, {timeout:?}: gave up after {took:?}"
        );
        assert!(e.to_string().contains("gave up acquiring"), "{e}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_shorter_outage_does_not_end_a_wait() {
    let w = World::new();
    let (a, conn) = w.client("a", 1);
    let (b, _) = w.client("b", 2);
    let held = b.acquire("job", &opts()).await.unwrap();
    conn.faults().set_unavailable(true);
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.acquire("job", &opts()).await }
    });
    // Two outages of 8 s each (below the 10 s timeout), with the store back in between, and
    // the holder in the way all along: the waiter waits on.
    sleep(secs(8.0)).await;
    conn.faults().set_unavailable(false);
    sleep(secs(3.0)).await;
    conn.faults().set_unavailable(true);
    sleep(secs(8.0)).await;
    conn.faults().set_unavailable(false);
    assert!(
        !waiter.is_finished(),
        "the waiter gave up: {:?}",
        waiter.await
    );
    held.release().await.unwrap();
    let got = tokio::time::timeout(secs(60.0), waiter)
        .await
        .expect("the waiter never got the released lease")
        .unwrap()
        .unwrap();
    assert!(got.epoch() > held.epoch());
}

/// A queued request does not fail on one transient fault of its session's first requests
/// (found by tests/tests/queue_history on moto and MinIO: requests that could wait minutes
/// failed within milliseconds of one lost reply or one 503). The record's read passes; the
/// fault hits the session's read, or its create (failed, or applied with its reply lost).
#[tokio::test(start_paused = true)]
async fn a_queued_request_survives_one_transient_fault_at_its_sessions_start() {
    use lease::store::memory::{Fault, Op};
    for (op, fault) in [
        (Op::Get, Fault::Fail),
        (Op::Put, Fault::Fail),
        (Op::Put, Fault::LoseReply),
    ] {
        let w = World::new();
        let (a, conn) = w.client("a", 1);
        // A no-op fault for the record's read, so the scripted one hits the session's request.
        conn.faults()
            .push(Op::Get, Fault::DelayBefore(Duration::ZERO));
        conn.faults().push(op, fault);
        let o = opts().queue().wait(secs(30.0));
        let got = tokio::time::timeout(secs(3600.0), a.acquire("job", &o))
            .await
            .unwrap_or_else(|_| panic!("{op:?} {fault:?}: still trying after 1 h"));
        let held = got.unwrap_or_else(|e| panic!("{op:?} {fault:?}: {e}"));
        assert!(
            held.grant().is_some(),
            "{op:?} {fault:?}: not a queued grant"
        );
        held.release().await.unwrap();
    }
}

#[test]
fn the_unavailable_timeout_is_checked() {
    use lease::store::Store;
    let caps = lease::store::memory::MemoryStore::new().capabilities();
    let mut o = opts();
    o.unavailable_timeout = Some(Duration::ZERO);
    let e = o.timing(&caps).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Invalid, "{e}");
    assert!(e.to_string().contains("unavailable timeout"), "{e}");
}

/// Real endpoints on 127.0.0.1 that never serve a request: GCS's JSON API (anonymous, so no
/// credential lookup leaves the machine).
#[cfg(feature = "gcs")]
mod real_endpoints {
    use std::net::TcpListener;
    use std::time::{Duration, Instant};

    use lease::{Client, ErrorKind, LeaseOptions};

    use super::assert_reads_as_unavailable;

    /// A port nothing listens on: connections are refused at once.
    fn closed_port() -> (u16, ()) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        (l.local_addr().unwrap().port(), ())
    }

    /// A listener that accepts connections (the kernel's backlog does) and never answers.
    fn silent_port() -> (u16, TcpListener) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        (l.local_addr().unwrap().port(), l)
    }

    fn client(port: u16, name: &str) -> (Client, String) {
        let url = format!("gs://bucket/{name}?endpoint=http://127.0.0.1:{port}&anonymous=true");
        Client::for_url(&url).unwrap()
    }

    /// The default ttl, 30 s: one request times out after 5 s.
    fn opts() -> LeaseOptions {
        LeaseOptions::new(Duration::from_secs(30))
    }

    async fn timed(
        f: impl std::future::Future<Output = lease::Result<lease::Lease>>,
    ) -> (lease::Error, Duration) {
        let start = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(60), f)
            .await
            .expect("still trying after 60 s");
        (r.unwrap_err(), start.elapsed())
    }

    #[tokio::test]
    async fn a_wait_returns_unavailable_soon_after_it_ends() {
        let (refused, ()) = closed_port();
        let (silent, _keep) = silent_port();
        for (what, port) in [("refused", refused), ("silent", silent)] {
            let (c, key) = client(port, &format!("wait-{what}"));
            let (e, took) = timed(c.acquire(&key, &opts().wait(Duration::from_secs(2)))).await;
            assert_reads_as_unavailable(&e);
            assert!(
                took >= Duration::from_millis(1900),
                "{what}: gave up early, {took:?}"
            );
            assert!(
                took < Duration::from_secs(9),
                "{what}: wait 2s took {took:?}"
            );
        }
    }

    #[tokio::test]
    async fn try_acquire_returns_unavailable_at_once() {
        let (refused, ()) = closed_port();
        let (silent, _keep) = silent_port();
        for (what, port) in [("refused", refused), ("silent", silent)] {
            let (c, key) = client(port, &format!("try-{what}"));
            let start = Instant::now();
            let e = c.try_acquire(&key, &opts()).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
            assert_reads_as_unavailable(&e);
            let took = start.elapsed();
            assert!(
                took < Duration::from_secs(7),
                "{what}: try_acquire took {took:?}"
            );
        }
    }

    #[tokio::test]
    async fn waiting_forever_ends_after_the_unavailable_timeout() {
        let (refused, ()) = closed_port();
        let (silent, _keep) = silent_port();
        for (what, port) in [("refused", refused), ("silent", silent)] {
            let (c, key) = client(port, &format!("forever-{what}"));
            let o = opts().unavailable_timeout(Duration::from_secs(2));
            let (e, took) = timed(c.acquire(&key, &o)).await;
            assert_reads_as_unavailable(&e);
            assert!(
                took >= Duration::from_millis(1900),
                "{what}: gave up early, {took:?}"
            );
            assert!(took < Duration::from_secs(9), "{what}: took {took:?}");
        }
    }

    /// The default with no wait: max(ttl, 10 s), so 10 s for a 3 s ttl.
    #[tokio::test]
    async fn the_default_unavailable_timeout_ends_a_wait_for_ever() {
        let (refused, ()) = closed_port();
        let (c, key) = client(refused, "default");
        let (e, took) = timed(c.acquire(&key, &LeaseOptions::new(Duration::from_secs(3)))).await;
        assert_reads_as_unavailable(&e);
        assert!(
            took >= Duration::from_millis(9900),
            "gave up early, {took:?}"
        );
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }
}
