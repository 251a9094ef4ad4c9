//! One transient fault at the start of a queued request, on the S3 test servers through the
//! fault proxy (found by tests/tests/queue_history: on S3 several requests of every run failed
//! within milliseconds of a single lost reply, their `wait` of minutes notwithstanding).
//!
//! docs/protocol.md §5: "the wait bounds the acquire whatever is in the way, a holder or the
//! store": a request that may wait 30 s does not fail on one 503 or one lost reply.

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::time::Duration;

use lease::{Client, LeaseOptions};
use lease_systests::proxy::{proxied, Fault, On};

fn servers() -> Vec<(&'static str, String)> {
    lease_systests::s3_servers()
}

fn key(what: &str) -> String {
    format!(
        "queue-faults/{what}-{}-{}",
        std::process::id(),
        lease_systests::monotonic_ns()
    )
}

/// The request's first GET (the lock's record) passes; `fault` hits the `nth` request of
/// kind `on` after it (the session's read, then its create).
async fn queued_acquire_survives(url: &str, on: On, fault: Fault) -> lease::Result<u64> {
    let (proxy, store) = proxied(url).await;
    // A no-op fault for the record's read, so the scripted one hits the session's request.
    proxy.push(On::Get, Fault::Delay(Duration::ZERO));
    proxy.push(on, fault);
    let client = Client::new(store);
    let opts = LeaseOptions::new(Duration::from_secs(3))
        .wait(Duration::from_secs(30))
        .queue();
    let held = client.acquire(&key("start"), &opts).await?;
    let epoch = held.epoch();
    held.release().await?;
    assert_eq!(proxy.pending(), 0, "the scripted faults were all used");
    Ok(epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_survives_one_503_on_its_sessions_read() {
    for (name, url) in servers() {
        let r = queued_acquire_survives(&url, On::Get, Fault::SLOW_DOWN).await;
        assert!(r.is_ok(), "{name}: {}", r.unwrap_err());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_request_survives_one_lost_reply_to_its_sessions_create() {
    for (name, url) in servers() {
        let r = queued_acquire_survives(&url, On::Put, Fault::DropReply).await;
        assert!(r.is_ok(), "{name}: {}", r.unwrap_err());
    }
}
