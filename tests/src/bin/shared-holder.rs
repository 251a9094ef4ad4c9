//! A process that holds queued locks through one shared session (issue 24), for the kill -9
//! tests of tests/tests/shared_session.rs: `lease-shared-holder TTL_MS LOCK_URL...` (the locks
//! in one store). Prints `held KEY TOKEN` for each grant, then `alive NS` (CLOCK_MONOTONIC)
//! every 50 ms while it believes every grant, and exits 1 with `lost KEY REASON` when one is
//! lost. It never ends by itself: the test kills it.

#![allow(clippy::disallowed_methods)] // a real process in real time

use std::io::Write;
use std::time::Duration;

use lease::{Client, LeaseOptions, SessionOptions, SharedSession};
use lease_systests::monotonic_ns;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ttl = Duration::from_millis(args[0].parse().expect("TTL_MS"));
    let mut client = None;
    let mut keys = vec![];
    for url in &args[1..] {
        let (c, key) = Client::for_url(url).expect("a lock URL");
        client = Some(c);
        keys.push(key);
    }
    let client = client.expect("at least one lock URL");
    let session = SharedSession::open(&client, SessionOptions::new(ttl).label("shared-holder"))
        .await
        .expect("open the session");
    let mut grants = vec![];
    let mut out = std::io::stdout();
    for key in &keys {
        let g = session
            .acquire(key, &LeaseOptions::new(ttl).wait(Duration::from_secs(60)))
            .await
            .expect("acquire");
        writeln!(out, "held {key} {}", g.token()).unwrap();
        grants.push(g);
    }
    out.flush().unwrap();
    loop {
        if let Some(g) = grants.iter().find(|g| !g.is_held()) {
            writeln!(out, "lost {} {:?}", g.key(), g.lost_reason()).unwrap();
            std::process::exit(1);
        }
        writeln!(out, "alive {}", monotonic_ns()).unwrap();
        out.flush().unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
