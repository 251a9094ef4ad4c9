//! Requests per lease operation on GCS (fake-gcs-server) and Azure (Azurite), counted at a
//! pass-through proxy, as `s3_faults.rs::request_counts_are_at_the_floor` counts them on S3;
//! the figures are in docs/benchmarks.md. The protocol's floor is the same on every store:
//! a fresh client's acquire of a new key = 1 read (404) + 1 create (of a released record) + 1
//! conditional write (the take; issue 22), renew = 1 conditional
//! write, release = 1, re-acquire after its own release = 1, takeover of a released lease by
//! another client = 1 read + 1 conditional write; a fenced write = 1 conditional write when
//! the holder wrote the object last, else 1 read + 1 conditional write.

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::time::Duration;

use lease::store::{DynStore, GetOptions};
use lease::{Client, ErrorKind, LeaseOptions};
use lease_systests::proxy::{Counts, FaultProxy};

/// (name, store URL, the create / conditional-write / polling-read request kinds).
fn servers() -> Vec<(&'static str, String, [&'static str; 3])> {
    let mut out = vec![];
    for (name, var, kinds) in [
        (
            "fake-gcs-server",
            "LEASE_TEST_GCS_FAKE",
            [
                "POST if-generation-match=0",
                "POST if-generation-match",
                "GET if-generation-not-match",
            ],
        ),
        (
            "azurite",
            "LEASE_TEST_AZURE_AZURITE",
            ["PUT if-none-match=*", "PUT if-match", "GET if-none-match"],
        ),
    ] {
        match std::env::var(var) {
            Ok(url) => out.push((name, url, kinds)),
            Err(_) => {
                assert!(
                    std::env::var("CI").is_err(),
                    "CI=true but {var} is not set: run through scripts/test"
                );
                eprintln!("SKIPPED {name}: {var} unset; run scripts/test to include it");
            }
        }
    }
    out
}

fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("counts/{what}-{}-{t}", std::process::id())
}

async fn proxy_for(url: &str) -> (FaultProxy, DynStore) {
    lease_systests::proxy::proxied(url).await
}

fn line(what: &str, c: &Counts) -> String {
    let kinds: Vec<String> = c
        .requests
        .iter()
        .map(|(k, n)| format!("{n} × {k}"))
        .collect();
    let statuses: Vec<String> = c
        .statuses
        .iter()
        .map(|(s, n)| format!("{n} × {s}"))
        .collect();
    format!("{what}: {} ({})", kinds.join(" + "), statuses.join(", "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_counts_are_at_the_floor_on_gcs_and_azure() {
    for (server, url, [create, update, poll]) in servers() {
        let (proxy, store) = proxy_for(&url).await;
        let key = unique("lease");
        // ttl 30 s: renewals every 10 s never interfere with the counts below.
        let opts = LeaseOptions::default().wait(Duration::from_secs(10));
        let _ = store.get("counts/warmup", GetOptions::default()).await;
        proxy.reset_counts();
        let a = Client::new(store.clone());
        let held = a.acquire(&key, &opts).await.unwrap();
        let c = proxy.counts();
        eprintln!("{server}: {}", line("acquire, new key", &c));
        // The create makes the record released (it grants nobody); the take is conditional on
        // it (issue 22: only a conditional write hands an epoch out).
        assert_eq!(
            (c.get("GET"), c.get(create), c.get(update), c.total()),
            (1, 1, 1, 3),
            "{server}: {c:?}"
        );
        assert_eq!(c.status(404), 1, "{server}: {c:?}");

        // GCS takes about one write per second per object: space the writes.
        let pace = || tokio::time::sleep(Duration::from_millis(1100));
        pace().await;
        proxy.reset_counts();
        held.renew().await.unwrap();
        let c = proxy.counts();
        eprintln!("{server}: {}", line("renew", &c));
        assert_eq!((c.get(update), c.total()), (1, 1), "{server}: {c:?}");

        pace().await;
        proxy.reset_counts();
        held.release().await.unwrap();
        let c = proxy.counts();
        eprintln!("{server}: {}", line("release", &c));
        assert_eq!((c.get(update), c.total()), (1, 1), "{server}: {c:?}");

        pace().await;
        proxy.reset_counts();
        let again = a.acquire(&key, &opts).await.unwrap();
        let c = proxy.counts();
        eprintln!(
            "{server}: {}",
            line("acquire by the client that released it", &c)
        );
        assert_eq!((c.get(update), c.total()), (1, 1), "{server}: {c:?}");
        pace().await;
        again.release().await.unwrap();

        pace().await;
        proxy.reset_counts();
        let b = Client::new(store.clone());
        let taken = b.acquire(&key, &opts).await.unwrap();
        let c = proxy.counts();
        eprintln!(
            "{server}: {}",
            line("takeover of a released lease, fresh client", &c)
        );
        assert_eq!(
            (c.get("GET"), c.get(update), c.total()),
            (1, 1, 2),
            "{server}: {c:?}"
        );

        // Fenced writes to a data object.
        let data = format!("{key}-data");
        proxy.reset_counts();
        taken.fenced_put(&data, "one").await.unwrap();
        let c = proxy.counts();
        eprintln!(
            "{server}: {}",
            line("first fenced write of a new object", &c)
        );
        assert_eq!(
            (c.get("GET"), c.get(create), c.total()),
            (1, 1, 2),
            "{server}: {c:?}"
        );
        pace().await;
        proxy.reset_counts();
        taken.fenced_put(&data, "two").await.unwrap();
        let c = proxy.counts();
        eprintln!(
            "{server}: {}",
            line("later fenced write by the same holder", &c)
        );
        assert_eq!((c.get(update), c.total()), (1, 1), "{server}: {c:?}");

        // A waiter polling an unchanged record: conditional reads (304 where the server
        // honours them; fake-gcs-server ignores ifGenerationNotMatch and sends the record).
        let w = Client::new(store.clone());
        proxy.reset_counts();
        let e = w
            .acquire(
                &key,
                &LeaseOptions::default()
                    .wait(Duration::from_secs(2))
                    .poll_interval(Duration::from_millis(200)),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{server}: {e}");
        let c = proxy.counts();
        eprintln!(
            "{server}: {}",
            line("a waiter for 2 s, polling every 200 ms", &c)
        );
        assert_eq!(
            c.writes(),
            0,
            "{server}: a waiter never writes a held lease"
        );
        assert_eq!(c.get("GET"), 1, "{server}: {c:?}");
        assert!(c.get(poll) >= 3, "{server}: {c:?}");
        if server == "azurite" {
            assert_eq!(c.status(304), c.get(poll), "{server}: {c:?}");
        }
        pace().await;
        taken.release().await.unwrap();
    }
}
