//! What the tests of the GCS and Azure stores share: which test servers are configured (the
//! env file of `scripts/stores.sh`), and the lease protocol on a real server process.
//! `store_s3.rs` has its own protocol tests for S3 and uses the contention test here.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use lease::clock::{Clock, SystemClock};
use lease::store::{Cond, DynStore, Get, GetOptions, Put};
use lease::{Client, ErrorKind, LeaseOptions};

/// The configured servers for one store type: `(name, store URL)` from `vars`
/// (`(name, env var)`). Under CI the first is mandatory; outside CI a missing server is
/// reported loudly and the tests return.
pub fn servers(kind: &str, vars: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    let mut out = vec![];
    for (name, var) in vars {
        if let Ok(url) = std::env::var(var) {
            if !url.is_empty() {
                out.push((*name, url));
            }
        }
        if let Ok(why) = std::env::var(format!("{var}_SKIPPED")) {
            eprintln!("\n!!! {name} NOT TESTED: {why} !!!\n");
        }
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if out.is_empty() {
        let (_, first) = vars[0];
        assert!(
            !in_ci,
            "CI=true but {first} is not set: run `scripts/stores.sh start` and source its env \
             file before the {kind} tests"
        );
        eprintln!(
            "\n!!! SKIPPED: no {kind} test server ({first} unset). Run `scripts/stores.sh start` \
             and source .cache/stores/env to test {kind}. !!!\n"
        );
    }
    out
}

/// A prefix no other run uses.
pub fn unique(what: &str) -> String {
    let t = SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}-{}-{t}", std::process::id())
}

pub fn endpoint_of(url: &str) -> String {
    url.split(['?', '&'])
        .find_map(|p| p.strip_prefix("endpoint="))
        .expect("test URLs name their endpoint")
        .to_string()
}

pub fn written(p: Put) -> lease::store::Version {
    match p {
        Put::Written { version, .. } => version,
        other => panic!("expected the write to land: {other:?}"),
    }
}

/// Reads and writes carry the store's clock, also a poll answered "not modified".
pub async fn polling_reads_carry_the_store_clock(store: DynStore, key: &str) {
    let missing = store.get(key, GetOptions::default()).await.unwrap();
    assert!(
        matches!(
            missing,
            Get::NotFound {
                server_now: Some(_)
            }
        ),
        "{missing:?}"
    );
    let v = match store
        .put(key, "x".into(), Cond::Create, &Default::default())
        .await
        .unwrap()
    {
        Put::Written {
            version,
            server_now,
        } => {
            assert!(server_now.is_some(), "a write reports the Date");
            version
        }
        other => panic!("{other:?}"),
    };
    let g = store
        .get(
            key,
            GetOptions {
                if_none_match: Some(&v),
                max_len: Some(10),
            },
        )
        .await
        .unwrap();
    assert!(
        matches!(
            g,
            Get::NotModified {
                server_now: Some(_)
            }
        ),
        "{g:?}"
    );
}

/// The conditional-delete capability a URL claims is what the server does with a stale
/// delete.
pub async fn conditional_delete_capability_is_truthful(server: &str, store: DynStore, key: &str) {
    let v1 = written(
        store
            .put(key, "one".into(), Cond::Create, &Default::default())
            .await
            .unwrap(),
    );
    written(
        store
            .put(
                key,
                "two".into(),
                Cond::Match(v1.clone()),
                &Default::default(),
            )
            .await
            .unwrap(),
    );
    let stale = store.delete(key, &v1).await.unwrap();
    let honoured = matches!(stale, lease::store::Delete::ConditionFailed);
    eprintln!("{server}: a stale conditional delete was {stale:?}");
    assert_eq!(
        store.capabilities().conditional_delete,
        honoured,
        "{server}: the store claims conditional_delete={} but the server {} the condition",
        store.capabilities().conditional_delete,
        if honoured { "honours" } else { "ignores" }
    );
}

fn opts(ttl: Duration) -> LeaseOptions {
    LeaseOptions::new(ttl).wait(Duration::from_secs(60))
}

/// Acquire, renew for a while, release, and acquire again: epochs and revisions as the
/// protocol says. `ttl` must respect the store's minimum write interval (3 renewals per ttl).
pub async fn acquire_renew_release_and_reacquire(server: &str, store: DynStore, key: &str) {
    let a = Client::new(store.clone());
    let b = Client::new(store.clone());
    let ttl = Duration::from_secs(3);
    let held = a.acquire(key, &opts(ttl)).await.unwrap();
    let first = held.epoch();
    assert!(first > 1_700_000_000_000, "{server}: {first}");
    let e = b
        .acquire(key, &opts(ttl).wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held, "{server}: {e}");
    assert_eq!(e.epoch(), Some(first));
    SystemClock.sleep(ttl).await;
    held.ensure_held(Duration::from_millis(100)).unwrap();
    let status = b.status(key).await.unwrap();
    assert_eq!(status.epoch, Some(first), "{server}: {status:?}");
    let raw = match store.get(key, GetOptions::default()).await.unwrap() {
        Get::Found(o) => o,
        other => panic!("{other:?}"),
    };
    let rec: serde_json::Value = serde_json::from_slice(raw.bytes.as_ref().unwrap()).unwrap();
    assert!(rec["rev"].as_u64().unwrap() >= 3, "{server}: {rec}");
    assert_eq!(rec["epoch"], first);
    held.release().await.unwrap();
    let next = b
        .acquire(key, &opts(ttl).wait(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(next.epoch(), first + 1, "{server}");
    next.release().await.unwrap();
    let again = b
        .acquire(key, &opts(ttl).wait(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(again.epoch(), first + 2, "{server}");
    again.release().await.unwrap();
}

/// Acquire in a runtime of its own, then stop that runtime without releasing: a holder that
/// crashed. Returns the epoch it held.
pub fn crashed_holder(store: DynStore, key: &str, ttl: Duration) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(store);
    let held = rt.block_on(client.acquire(key, &opts(ttl))).unwrap();
    let epoch = held.epoch();
    std::mem::forget(held);
    rt.shutdown_background();
    epoch
}

/// A waiter takes over after a crash, and not before the dead holder's deadline.
pub fn a_waiter_takes_over_after_a_crash(
    server: &str,
    open: impl Fn() -> DynStore,
    key: &str,
    ttl: Duration,
) {
    let clock = SystemClock;
    let before = clock.now();
    let dead_epoch = crashed_holder(open(), key, ttl);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let taken = rt.block_on(async {
        let waiter = Client::new(open());
        let held = waiter.acquire(key, &opts(ttl)).await.unwrap();
        let at = clock.now();
        held.release().await.unwrap();
        (held.epoch(), at)
    });
    assert!(taken.0 > dead_epoch, "{server}: epochs must increase");
    assert!(
        taken.1 - before >= ttl,
        "{server}: taken over {:?} after the crashed holder started",
        taken.1 - before
    );
}

/// The store-clock rule: a fresh process takes over a long-dead lease at once.
pub fn a_fresh_process_takes_over_a_long_dead_lease(
    server: &str,
    open: impl Fn() -> DynStore,
    key: &str,
    ttl: Duration,
) {
    let dead_epoch = crashed_holder(open(), key, ttl);
    // ttl + grace (1 s) + resolution (1 s), plus a second for whole-second dates.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(SystemClock.sleep(ttl + Duration::from_millis(3_100)));
    let fresh = Client::new(open());
    let start = SystemClock.now();
    let held = rt
        .block_on(fresh.acquire(key, &opts(ttl).wait(Duration::ZERO)))
        .unwrap_or_else(|e| panic!("{server}: {e}"));
    assert!(held.epoch() > dead_epoch);
    assert!(SystemClock.now() - start < ttl, "{server}: not at once");
    rt.block_on(held.release()).unwrap();
}

/// Eight clients with their own connections contend, `rounds` acquisitions each with `ttl`;
/// no overlap, increasing epochs.
pub async fn many_clients_one_lease(
    server: &str,
    open: impl Fn() -> DynStore,
    key: &str,
    rounds: usize,
    ttl: Duration,
) {
    let history = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = vec![];
    for _ in 0..8 {
        let store = open();
        let history = history.clone();
        let key = key.to_string();
        tasks.push(tokio::spawn(async move {
            let client = Client::new(store);
            for _ in 0..rounds {
                let held = client.acquire(&key, &opts(ttl)).await.unwrap();
                let start = SystemClock.now();
                held.ensure_held(Duration::from_secs(1)).unwrap();
                SystemClock.sleep(Duration::from_millis(20)).await;
                let end = SystemClock.now();
                history.lock().unwrap().push((held.epoch(), start, end));
                held.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let mut h = history.lock().unwrap().clone();
    assert_eq!(h.len(), 8 * rounds, "{server}");
    h.sort_by_key(|x| x.1);
    for w in h.windows(2) {
        assert!(w[1].1 >= w[0].2, "{server}: overlapping holds {w:?}");
        assert!(w[1].0 > w[0].0, "{server}: epochs did not increase {w:?}");
    }
}

/// `lease doctor` accepts the server, races included, and cleans up.
pub async fn doctor_accepts(server: &str, store: DynStore, prefix: &str, delete_honoured: bool) {
    let report = lease::doctor::check(&store, prefix)
        .await
        .unwrap_or_else(|e| panic!("{server}: {e}"));
    let json = report.to_json();
    eprintln!("{server}: {json:#}");
    assert_eq!(json["ok"], true, "{server}");
    assert_eq!(json["cleaned_up"], true, "{server}: {json}");
    assert_eq!(
        json["conditional_delete"]["honoured"], delete_honoured,
        "{server}: {json}"
    );
    let key = json["probe_key"].as_str().unwrap();
    assert!(matches!(
        store.get(key, GetOptions::default()).await.unwrap(),
        Get::NotFound { .. }
    ));
}
