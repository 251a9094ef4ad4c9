//! The protocol on real S3 servers (moto, MinIO) through a fault-injecting proxy
//! (`lease_systests::proxy`): each fault on each write of a lease's life, seeded random mixes of
//! faults with several contenders, a partitioned holder, and the request counts of each
//! operation. Invariants (protocol §9) are checked from recorded histories:
//! no two holders at once, epochs strictly increasing, no lease reported lost when its write had
//! landed, takeover within ttl + grace + resolution + poll.
//!
//! Servers come from `scripts/s3-servers.sh start` (`LEASE_TEST_S3_MOTO`, `LEASE_TEST_S3_MINIO`);
//! under CI moto is mandatory.

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease::store::s3::S3Store;
use lease::store::{DynStore, Get, GetOptions};
use lease::{Client, ErrorKind, LeaseOptions, StoreUrl};
use lease_systests::proxy::{Fault, FaultProxy, On, RandomFaults};

fn servers() -> Vec<(&'static str, String)> {
    let mut out = vec![];
    for (name, var) in [
        ("moto", "LEASE_TEST_S3_MOTO"),
        ("minio", "LEASE_TEST_S3_MINIO"),
    ] {
        if let Ok(url) = std::env::var(var) {
            if !url.is_empty() {
                out.push((name, url));
            }
        }
    }
    if !out.iter().any(|(n, _)| *n == "moto") {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true" || v == "1"),
            "CI=true but LEASE_TEST_S3_MOTO is not set: run scripts/s3-servers.sh start first"
        );
        eprintln!("\n!!! SKIPPED: no S3 test server (LEASE_TEST_S3_MOTO unset) !!!\n");
        return vec![];
    }
    if let Ok(why) = std::env::var("LEASE_TEST_S3_MINIO_SKIPPED") {
        eprintln!("\n!!! MinIO NOT TESTED: {why} !!!\n");
    }
    out
}

fn open(url: &str) -> DynStore {
    match StoreUrl::parse(url).unwrap() {
        StoreUrl::S3 { bucket, options } => Arc::new(S3Store::open(&bucket, &options).unwrap()),
        other => panic!("not S3: {other}"),
    }
}

async fn proxy_for(url: &str) -> (FaultProxy, DynStore) {
    lease_systests::proxy::proxied(url).await
}

fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("faults/{what}-{}-{t}", std::process::id())
}

/// ttl 3 s: renew every 1 s, request timeout 500 ms.
fn opts() -> LeaseOptions {
    LeaseOptions::new(Duration::from_secs(3)).wait(Duration::from_secs(30))
}

/// The record at `key`, read straight from the server.
async fn record(store: &DynStore, key: &str) -> serde_json::Value {
    match store.get(key, GetOptions::default()).await.unwrap() {
        Get::Found(o) => serde_json::from_slice(o.bytes.as_ref().unwrap()).unwrap(),
        other => panic!("{key}: {other:?}"),
    }
}

const FAULTS: &[(&str, Fault)] = &[
    ("500", Fault::INTERNAL_ERROR),
    ("503 SlowDown", Fault::SLOW_DOWN),
    ("409 ConditionalRequestConflict", Fault::CONFLICT),
    ("reply dropped after the write landed", Fault::DropReply),
    ("412 after the write landed", Fault::LandThen412),
    // Longer than the 500 ms request timeout: the client gives up, reads back, resends; the
    // delayed original lands late or loses to the resend. Either way one copy lands.
    (
        "delayed past the request timeout",
        Fault::Delay(Duration::from_millis(800)),
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_on_every_write_of_a_lease() {
    for (server, url) in servers() {
        let direct = open(&url);
        for (name, fault) in FAULTS {
            eprintln!("{server}: {name}");
            let (proxy, store) = proxy_for(&url).await;
            let key = unique("each");
            let client = Client::new(store);
            let other = Client::new(direct.clone());

            // Acquire (fresh client: GET 404, then PUT If-None-Match: * gets the fault).
            proxy.push(On::Put, *fault);
            let held = client
                .acquire(&key, &opts())
                .await
                .unwrap_or_else(|e| panic!("{server} {name}: acquire: {e}"));
            assert_eq!(
                proxy.pending(),
                0,
                "{server} {name}: the fault was not used"
            );
            let rec = record(&direct, &key).await;
            assert_eq!(
                rec["holder"]["id"],
                held.holder().id.as_str(),
                "{server} {name}"
            );
            assert_eq!(rec["epoch"], held.epoch(), "{server} {name}");

            // Renew.
            let rev_before = record(&direct, &key).await["rev"].as_u64().unwrap();
            proxy.push(On::Put, *fault);
            held.renew()
                .await
                .unwrap_or_else(|e| panic!("{server} {name}: renew: {e}"));
            assert_eq!(proxy.pending(), 0);
            assert!(
                held.lost_reason().is_none(),
                "{server} {name}: lost on renew"
            );
            let rec = record(&direct, &key).await;
            assert!(rec["rev"].as_u64().unwrap() > rev_before, "{server} {name}");
            assert_eq!(rec["holder"]["id"], held.holder().id.as_str());
            // Nobody else can take it.
            let e = other
                .acquire(&key, &opts().wait(Duration::ZERO))
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Held, "{server} {name}: {e}");

            // Release.
            proxy.push(On::Put, *fault);
            held.release()
                .await
                .unwrap_or_else(|e| panic!("{server} {name}: release: {e}"));
            assert_eq!(proxy.pending(), 0);
            assert_eq!(record(&direct, &key).await["state"], "released");
            let next = other
                .acquire(&key, &opts().wait(Duration::ZERO))
                .await
                .unwrap_or_else(|e| panic!("{server} {name}: after release: {e}"));
            assert_eq!(next.epoch(), held.epoch() + 1);
            next.release().await.unwrap();
            assert!(proxy.counts().faults >= 3, "{server} {name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_on_reads_are_retried() {
    for (server, url) in servers() {
        let (proxy, store) = proxy_for(&url).await;
        let key = unique("reads");
        let client = Client::new(store);
        for fault in [Fault::SLOW_DOWN, Fault::INTERNAL_ERROR, Fault::DropReply] {
            proxy.push(On::Get, fault);
        }
        let held = client.acquire(&key, &opts()).await.unwrap();
        assert_eq!(proxy.pending(), 0, "{server}");
        held.release().await.unwrap();
    }
}

/// One hold in a history: who, which epoch, from when to when (this process's clock).
#[derive(Debug, Clone)]
#[allow(dead_code)] // `who` is shown in failure messages
struct Hold {
    who: usize,
    epoch: u64,
    start: Instant,
    end: Instant,
}

fn check_history(mut holds: Vec<Hold>) -> Result<(), String> {
    holds.sort_by_key(|h| h.start);
    for w in holds.windows(2) {
        if w[1].start < w[0].end {
            return Err(format!("overlapping holds: {:?} and {:?}", w[0], w[1]));
        }
        if w[1].epoch <= w[0].epoch {
            return Err(format!(
                "epochs did not increase: {:?} then {:?}",
                w[0], w[1]
            ));
        }
    }
    Ok(())
}

#[test]
fn the_history_check_catches_overlaps_and_stale_epochs() {
    // Negative control for check_history.
    let t = Instant::now();
    let ms = |n| t + Duration::from_millis(n);
    let overlap = vec![
        Hold {
            who: 0,
            epoch: 1,
            start: ms(0),
            end: ms(10),
        },
        Hold {
            who: 1,
            epoch: 2,
            start: ms(5),
            end: ms(15),
        },
    ];
    assert!(check_history(overlap).is_err());
    let stale = vec![
        Hold {
            who: 0,
            epoch: 2,
            start: ms(0),
            end: ms(10),
        },
        Hold {
            who: 1,
            epoch: 2,
            start: ms(11),
            end: ms(15),
        },
    ];
    assert!(check_history(stale).is_err());
    let fine = vec![
        Hold {
            who: 0,
            epoch: 1,
            start: ms(0),
            end: ms(10),
        },
        Hold {
            who: 1,
            epoch: 2,
            start: ms(11),
            end: ms(15),
        },
    ];
    assert!(check_history(fine).is_ok());
}

/// Whether a write carrying `holder_id` in state `state` landed through `proxy`.
fn landed(proxy: &FaultProxy, holder_id: &str, state: &str) -> bool {
    proxy.landed().iter().any(|w| {
        serde_json::from_slice::<serde_json::Value>(&w.body)
            .is_ok_and(|r| r["holder"]["id"] == holder_id && r["state"] == state)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seeded_random_fault_mixes_keep_the_invariants() {
    for (server, url) in servers() {
        let mut false_release_losses = vec![];
        for seed in [1u64, 2, 3] {
            let key = unique(&format!("random-{seed}"));
            let history = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = vec![];
            let mut faults = 0;
            for who in 0..4usize {
                let (proxy, store) = proxy_for(&url).await;
                // About one request in five meets a fault.
                proxy.set_random(Some(RandomFaults {
                    seed: seed * 100 + who as u64,
                    faults: vec![
                        (Fault::INTERNAL_ERROR, 0.03),
                        (Fault::SLOW_DOWN, 0.03),
                        (Fault::CONFLICT, 0.03),
                        (Fault::DropReply, 0.05),
                        (Fault::LandThen412, 0.04),
                        (Fault::Delay(Duration::from_millis(700)), 0.02),
                    ],
                }));
                let history = history.clone();
                let key = key.clone();
                tasks.push(tokio::spawn(async move {
                    let client = Client::new(store);
                    let opts =
                        LeaseOptions::new(Duration::from_secs(3)).wait(Duration::from_secs(120));
                    let mut release_losses = vec![];
                    for _ in 0..5 {
                        // Acquire and renew must succeed through every fault.
                        let held = client
                            .acquire(&key, &opts)
                            .await
                            .unwrap_or_else(|e| panic!("{who}: acquire: {e}"));
                        let start = Instant::now();
                        held.ensure_held(Duration::from_millis(500))
                            .unwrap_or_else(|e| panic!("{who}: {e}"));
                        tokio::time::sleep(Duration::from_millis(30)).await;
                        // The hold ends before the release is sent.
                        let end = Instant::now();
                        held.ensure_held(Duration::ZERO)
                            .unwrap_or_else(|e| panic!("{who}: lost while holding: {e}"));
                        history.lock().unwrap().push(Hold {
                            who,
                            epoch: held.epoch(),
                            start,
                            end,
                        });
                        if let Err(e) = held.release().await {
                            // Reported lost: true only if our release did not land, or if it
                            // was read back after more tenures than a record's `prev`
                            // remembers (docs/protocol.md §5: "beyond that the release is
                            // reported lost — wrongly, but safely").
                            let ours = landed(&proxy, &held.holder().id, "released");
                            let beyond = match held.lost_reason() {
                                Some(lease::LostReason::TakenOver { epoch, .. }) => {
                                    epoch >= held.epoch() + lease::record::MAX_PREV as u64
                                }
                                _ => false,
                            };
                            release_losses.push((ours, beyond, e.to_string()));
                        }
                    }
                    (proxy.counts().faults, release_losses)
                }));
            }
            for t in tasks {
                let (f, losses) = t
                    .await
                    .unwrap_or_else(|e| panic!("{server} seed {seed}: {e}"));
                faults += f;
                for (landed, beyond, e) in losses {
                    assert!(
                        landed,
                        "{server} seed {seed}: a release failed and did not land: {e}"
                    );
                    if beyond {
                        eprintln!(
                            "{server} seed {seed}: a landed release read back more than \
                             {} tenures later, reported lost (the stated bound): {e}",
                            lease::record::MAX_PREV
                        );
                    } else {
                        false_release_losses.push(e);
                    }
                }
            }
            let holds = history.lock().unwrap().clone();
            assert_eq!(holds.len(), 20, "{server} seed {seed}");
            check_history(holds).unwrap_or_else(|e| panic!("{server} seed {seed}: {e}"));
            eprintln!("{server} seed {seed}: {faults} faults injected");
            assert!(faults > 0, "{server} seed {seed}: no fault was injected");
        }
        // No lease may be reported lost when its write landed (protocol invariant): a release
        // whose reply was lost and whose lease was taken at once is recognised by the new
        // record's `prev`, within the last MAX_PREV tenures (CI's cold run of 2026-11-27 read
        // one back 8 tenures later, at epoch 446 → 454: excused above, and said).
        assert!(
            false_release_losses.is_empty(),
            "{server}: releases that landed were reported lost: {false_release_losses:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_landed_is_not_reported_lost() {
    for (server, url) in servers() {
        let key = unique("release-landed");
        let (proxy, store) = proxy_for(&url).await;
        let holder = Client::new(store);
        let held = holder.acquire(&key, &opts()).await.unwrap();
        // The release is delayed past the 500 ms request timeout and lands at 700 ms; the
        // read-back that follows the timeout is answered 503 a few times, so by the time it
        // succeeds another client has taken the released lease.
        proxy.push(On::Put, Fault::Delay(Duration::from_millis(700)));
        for _ in 0..4 {
            proxy.push(On::Get, Fault::SLOW_DOWN);
        }
        let releasing = tokio::spawn(async move { (held.release().await, held) });
        let taker = Client::new(open(&url));
        let mut taken = None;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if let Ok(Some(l)) = taker.try_acquire(&key, &opts()).await {
                taken = Some(l);
                break;
            }
        }
        let taken = taken.expect("the released lease was taken");
        let (result, held) = releasing.await.unwrap();
        assert!(landed(&proxy, &held.holder().id, "released"), "{server}");
        assert!(
            result.is_ok(),
            "{server}: the release landed but was reported as {result:?}"
        );
        taken.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_holder_stops_before_a_waiter_takes_over() {
    for (server, url) in servers() {
        let key = unique("partition");
        let (hproxy, hstore) = proxy_for(&url).await;
        let (_wproxy, wstore) = proxy_for(&url).await;
        let ttl = Duration::from_secs(3);
        let holder = Client::new(hstore);
        let held = holder.acquire(&key, &opts()).await.unwrap();
        let waiter = Client::new(wstore);
        let waiting = tokio::spawn(async move {
            let l = waiter.acquire(&key, &opts()).await.unwrap();
            let at = Instant::now();
            let epoch = l.epoch();
            l.release().await.unwrap();
            (epoch, at)
        });
        // Let the waiter start polling, then cut the holder off right after a renewal.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        held.renew().await.unwrap();
        let cut = Instant::now();
        hproxy.set_partitioned(true);
        let reason = held.lost().await;
        let lost_at = Instant::now();
        assert_eq!(reason, lease::LostReason::Expired, "{server}");
        let (epoch, taken_at) = waiting.await.unwrap();
        assert!(epoch > held.epoch(), "{server}");
        // Safety: the holder stopped believing before the waiter started.
        assert!(
            taken_at >= lost_at,
            "{server}: taken over {:?} before the holder knew it had lost",
            lost_at - taken_at
        );
        // Liveness, with slack for a loaded two-core machine: ttl + grace + 1 s + poll after
        // the holder's last write.
        let bound =
            ttl + Duration::from_secs(1) + Duration::from_secs(1) + Duration::from_millis(300);
        let took = taken_at - cut;
        assert!(
            took <= bound + Duration::from_millis(1500),
            "{server}: took over {took:?} after the holder's last write, bound {bound:?}"
        );
        eprintln!("{server}: taken over {took:?} after the holder's last write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_counts_are_at_the_floor() {
    for (server, url) in servers() {
        let (proxy, store) = proxy_for(&url).await;
        let key = unique("counts");
        let opts = LeaseOptions::default().wait(Duration::from_secs(10));
        let _ = store.get("faults/warmup", GetOptions::default()).await;
        proxy.reset_counts();
        let a = Client::new(store.clone());
        // A fresh client on a new key reads first (the record may exist from an earlier run of
        // the same job), then creates the record released (it grants nobody) and takes it with
        // a write conditional on it (issue 22: only a conditional write hands an epoch out):
        // GET (404) + PUT If-None-Match: * + PUT If-Match.
        let held = a.acquire(&key, &opts).await.unwrap();
        let c = proxy.counts();
        assert_eq!(
            (
                c.get("GET"),
                c.get("PUT if-none-match=*"),
                c.get("PUT if-match"),
                c.total()
            ),
            (1, 1, 1, 3),
            "{server}: {c:?}"
        );
        assert_eq!(c.status(404), 1);
        proxy.reset_counts();
        held.renew().await.unwrap();
        let c = proxy.counts();
        assert_eq!(
            (c.get("PUT if-match"), c.total()),
            (1, 1),
            "{server}: renew {c:?}"
        );
        proxy.reset_counts();
        held.release().await.unwrap();
        let c = proxy.counts();
        assert_eq!(
            (c.get("PUT if-match"), c.total()),
            (1, 1),
            "{server}: release {c:?}"
        );
        proxy.reset_counts();
        let again = a.acquire(&key, &opts).await.unwrap();
        let c = proxy.counts();
        assert_eq!(
            (c.get("PUT if-match"), c.total()),
            (1, 1),
            "{server}: reacquire {c:?}"
        );
        again.release().await.unwrap();
        proxy.reset_counts();
        let b = Client::new(store.clone());
        let taken = b.acquire(&key, &opts).await.unwrap();
        let c = proxy.counts();
        assert_eq!(
            (c.gets(), c.get("PUT if-match"), c.total()),
            (1, 1, 2),
            "{server}: takeover {c:?}"
        );
        // A waiter polling an unchanged record gets 304s: the holder renews every 10 s, the
        // waiter polls every 200 ms for 2 s.
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
        eprintln!("{server}: waiter {c:?}");
        assert_eq!(c.puts(), 0, "{server}: a waiter never writes a held lease");
        assert!(c.get("GET if-none-match") >= 3, "{server}: {c:?}");
        assert_eq!(
            c.status(200),
            1,
            "{server}: only the first read has a body: {c:?}"
        );
        assert_eq!(c.status(304), c.get("GET if-none-match"), "{server}: {c:?}");
        taken.release().await.unwrap();
    }
}

#[tokio::test]
async fn doctor_refuses_a_server_that_ignores_conditions() {
    // moto through a proxy that strips If-Match / If-None-Match: every write is accepted, as by
    // s3rver or an old gateway. (MinIO checks signatures, which cover those headers, so it
    // would refuse the stripped requests outright; moto is the honest target here.)
    for (server, url) in servers() {
        if server != "moto" {
            continue;
        }
        let (proxy, store) = proxy_for(&url).await;
        // The same store without stripping passes.
        let ok = lease::doctor::check(&store, &unique("doctor-ok"))
            .await
            .unwrap();
        assert!(ok.ok(), "{}", ok.verdict());
        proxy.set_strip_conditions(true);
        let e = lease::doctor::check(&store, &unique("doctor-careless"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{e}");
        let m = e.to_string();
        assert!(
            m.contains("duplicate_create") && m.contains("stale_update"),
            "{m}"
        );
        eprintln!("{server} without conditions: {m}");
        let report = lease::doctor::inspect(&store, &unique("doctor-careless"))
            .await
            .unwrap();
        let json = report.to_json();
        assert_eq!(json["ok"], false);
        assert_eq!(json["conditional_delete"]["honoured"], false, "{json}");
        assert_eq!(json["cleaned_up"], true, "{json}");
    }
}

/// CI stop 38: a preemption that loses the race with the live holder's renewal is sent again
/// and takes the lease; it does not wait for a holder that never lets go. The preemptor's read
/// is answered 2 s late (within its 3 s request timeout), so the holder (ttl 3 s: renewing
/// every second, straight to the server) has renewed before the preemption, written over the
/// version read, arrives: its condition fails (412). Before the fix the acquirer then waited
/// by the usual rules, for ever (here: until its 20 s wait ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preemption_that_loses_to_a_renewal_is_sent_again_and_takes_the_lease() {
    for (server, url) in servers() {
        let key = unique("preempt-race");
        let holder = Client::new(open(&url));
        let held = holder
            .acquire(&key, &LeaseOptions::new(Duration::from_secs(3)))
            .await
            .unwrap();
        let (proxy, store) = proxy_for(&url).await;
        proxy.push(On::Get, Fault::DelayReply(Duration::from_secs(2)));
        let preemptor = Client::new(store);
        let opts = LeaseOptions::new(Duration::from_secs(6))
            .request_timeout(Duration::from_secs(3))
            .wait(Duration::from_secs(20))
            .preempt(lease::Preempt::EveryEffectFenced);
        let taken = preemptor.acquire(&key, &opts).await;
        // The race was run: the first preemption's condition failed.
        assert!(
            proxy.counts().status(412) >= 1,
            "{server}: no preemption lost to a renewal ({:?})",
            proxy.counts()
        );
        let taken = taken.unwrap_or_else(|e| panic!("{server}: the preemption waited: {e}"));
        assert!(taken.epoch() > held.epoch(), "{server}");
        let lost = tokio::time::timeout(Duration::from_secs(10), held.lost())
            .await
            .unwrap_or_else(|_| panic!("{server}: the preempted holder did not learn it"));
        assert!(
            matches!(lost, lease::LostReason::Preempted { .. }),
            "{server}: {lost}"
        );
        taken.release().await.unwrap();
    }
}
