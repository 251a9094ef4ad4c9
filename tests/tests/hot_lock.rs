//! One hot queued lock on stores that limit writes to one object (issue 24): the participants
//! reach moto, fake-gcs-server and Azurite through the test proxy playing each store's own
//! throttling answer (`lease_systests::write_limit`: S3 503 `SlowDown`, GCS 429
//! `rateLimitExceeded`, Azure 503 `ServerBusy`) at a rate low enough that a short test meets
//! it. Every acquisition and every release must still succeed (a refused write is retried with
//! backoff, never given up while the protocol's bounds allow, and a release is never lost), no
//! two participants may hold the lock at once, and the limit must really have refused writes.
//! The figures at the documented rates come from `lease-hot-lock` (docs/benchmarks.md).

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lease::{Client, LeaseOptions};
use lease_systests::proxy::proxied;
use lease_systests::write_limit::Limit;

fn servers() -> Vec<(Limit, String)> {
    let mut out = vec![];
    for (limit, var) in [
        (Limit::S3, "LEASE_TEST_S3_MOTO"),
        (Limit::Gcs, "LEASE_TEST_GCS_FAKE"),
        (Limit::Azure, "LEASE_TEST_AZURE_AZURITE"),
    ] {
        if let Some(url) = lease_systests::server(var) {
            out.push((limit, url));
        }
    }
    out
}

/// Participants, each with its own client (its own session), all asking at once.
const PARTICIPANTS: usize = 3;
/// Times each takes the lock.
const ROUNDS: usize = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_lock_under_each_stores_write_limit_grants_everyone_and_loses_no_release() {
    for (limit, url) in servers() {
        let (proxy, store) = proxied(&url).await;
        // A rate the joins, leaves and grants of three participants meet, with a burst of one
        // second's worth (the documented rates are measured by lease-hot-lock). Azure counts
        // reads too: three waiters polling every 250 ms send 12 a second, so its limit here is
        // above that (at 2 a second the polls alone keep the blob refused and a wait times
        // out: on Azure, waiters times polls a second must stay well under the blob's 500,
        // docs/stores.md).
        let rate = match limit {
            Limit::S3 | Limit::Gcs => 2.0,
            Limit::Azure => 15.0,
        };
        proxy.set_write_limit(Some((limit, rate, rate)));
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let key = format!("hot/{limit:?}-{}-{t}", std::process::id());
        let holders = Arc::new(AtomicUsize::new(0));
        let mut tasks = vec![];
        for _ in 0..PARTICIPANTS {
            let (store, key, holders) = (store.clone(), key.clone(), holders.clone());
            tasks.push(tokio::spawn(async move {
                let client = Client::new(store);
                let mut opts = LeaseOptions::new(Duration::from_secs(30))
                    .wait(Duration::from_secs(60))
                    .queue();
                opts.poll_interval = Some(Duration::from_millis(250));
                for _ in 0..ROUNDS {
                    let held = client
                        .acquire(&key, &opts)
                        .await
                        .map_err(|e| format!("an acquisition failed under the write limit: {e}"))?;
                    let others = holders.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    if others != 0 {
                        return Err(format!("{others} other holder(s) at once"));
                    }
                    held.release()
                        .await
                        .map_err(|e| format!("a release failed under the write limit: {e}"))?;
                }
                Ok::<(), String>(())
            }));
        }
        for task in tasks {
            if let Err(e) = task.await.unwrap() {
                panic!("{limit:?}: {e}");
            }
        }
        let counts = proxy.counts();
        eprintln!(
            "{limit:?}: {} throttled; {:?}",
            proxy.throttled(),
            counts.statuses
        );
        assert!(
            proxy.throttled() > 0 && counts.status(limit.status()) >= proxy.throttled(),
            "{limit:?}: the limit never refused a write, so this test showed nothing: {counts:?}"
        );
    }
}
