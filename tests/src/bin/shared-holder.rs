//! A process that holds queued locks through one shared session (issue 24), for the kill -9
//! tests of tests/tests/shared_session.rs: `lease-shared-holder TTL_MS LOCK_URL N` takes the N
//! locks `KEY/0` … `KEY/N-1` beside the lock URL's key (in one store), at most 256 acquisitions
//! in flight, through a session it opens, or with `LEASE_HOLDER_SESSION=process` through the
//! process's shared session (`SharedSession::acquire_on_process_session`, opened by the first
//! of those concurrent acquisitions). Prints `held KEY TOKEN SID` for each grant as it comes,
//! then `alive NS`
//! (CLOCK_MONOTONIC) every 50 ms while it believes every grant, and exits 1 with
//! `lost KEY REASON` when one is lost. It never ends by itself: the test kills it.

#![allow(clippy::disallowed_methods)] // a real process in real time

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use lease::{Client, LeaseOptions, SessionOptions, SharedSession};
use lease_systests::monotonic_ns;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [ttl, url, n] = &args[..] else {
        eprintln!("usage: lease-shared-holder TTL_MS LOCK_URL N");
        std::process::exit(64);
    };
    let ttl = Duration::from_millis(ttl.parse().expect("TTL_MS"));
    let n: usize = n.parse().expect("N");
    let (client, key) = Client::for_url(url).expect("a lock URL");
    let per_process = std::env::var("LEASE_HOLDER_SESSION").as_deref() == Ok("process");
    let session = match per_process {
        true => None,
        false => Some(
            SharedSession::open(&client, SessionOptions::new(ttl).label("shared-holder"))
                .await
                .expect("open the session"),
        ),
    };
    let opts = LeaseOptions::new(ttl).wait(Duration::from_secs(600));
    let mut acquiring = futures::stream::iter(0..n)
        .map(|i| {
            let (session, client, opts) = (&session, &client, &opts);
            let key = format!("{key}/{i}");
            async move {
                let g = match session {
                    Some(session) => session.acquire(&key, opts).await,
                    None => SharedSession::acquire_on_process_session(client, &key, opts).await,
                };
                (key, g.expect("acquire"))
            }
        })
        .buffer_unordered(256);
    let mut grants = Vec::with_capacity(n);
    let mut out = std::io::stdout();
    while let Some((key, g)) = acquiring.next().await {
        writeln!(out, "held {key} {} {}", g.epoch(), g.session().sid()).unwrap();
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
