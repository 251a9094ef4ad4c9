//! Cost and speed of the lease protocol on an S3 server (docs/benchmarks.md, section S3).
//!
//! ```text
//! s3-bench STORE_URL [ITERATIONS] [SAMPLE_SECS]
//! ```
//! `STORE_URL` is an `s3://bucket?endpoint=http://127.0.0.1:PORT&…` URL (e.g.
//! `$LEASE_TEST_S3_MOTO` from scripts/s3-servers.sh). It prints, as JSON:
//! - the requests each operation costs, counted at a pass-through proxy;
//! - the latency of acquire / renew / release / fenced writes straight to the server (median of ITERATIONS,
//!   default 200) and its ratio to one bare, unconditional PutObject of the same size;
//! - the requests of holding one lease and of one waiter waiting, at the default ttl (30 s),
//!   measured for SAMPLE_SECS (default 60) and scaled to an hour.

#![allow(clippy::disallowed_methods)] // a benchmark measures real time

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease::store::s3::S3Store;
use lease::store::DynStore;
use lease::{Client, LeaseOptions, Preempt, StoreUrl};
use lease_systests::proxy::{endpoint_addr, Counts, FaultProxy};
use serde_json::json;

fn open(url: &str) -> (DynStore, S3Store) {
    match StoreUrl::parse(url).expect("store URL") {
        StoreUrl::S3 { bucket, options } => {
            let s = S3Store::open(&bucket, &options).expect("S3 store");
            (Arc::new(s.clone()), s)
        }
        other => panic!("not an S3 URL: {other}"),
    }
}

fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("bench/{what}-{}-{t}", std::process::id())
}

fn summary(c: &Counts) -> serde_json::Value {
    json!({ "requests": c.requests, "statuses": c.statuses, "total": c.total() })
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let url = args
        .first()
        .expect("usage: s3-bench STORE_URL [ITERATIONS] [SAMPLE_SECS]");
    let iterations: usize = args.get(1).map_or(200, |n| n.parse().expect("ITERATIONS"));
    let sample = Duration::from_secs(args.get(2).map_or(60, |n| n.parse().expect("SAMPLE_SECS")));
    let upstream = endpoint_addr(url).expect("the URL names an http://127.0.0.1:PORT endpoint");

    // 1. Requests per operation, at a pass-through proxy.
    let proxy = FaultProxy::start(upstream).await.unwrap();
    let (pstore, _) = open(&proxy.store_url(url));
    let opts = LeaseOptions::default().wait(Duration::from_secs(10));
    let key = unique("counts");
    let mut counts = serde_json::Map::new();
    let mut step = |name: &str, proxy: &FaultProxy| {
        counts.insert(name.to_string(), summary(&proxy.counts()));
        proxy.reset_counts();
    };
    // Warm the connection pool so connection setup is not counted as an operation's cost.
    let _ = pstore.get("bench/warmup", Default::default()).await;
    proxy.reset_counts();
    let a = Client::new(pstore.clone());
    let held = a.acquire(&key, &opts).await.unwrap();
    step("acquire_new_key_fresh_client", &proxy);
    held.renew().await.unwrap();
    step("renew", &proxy);
    held.release().await.unwrap();
    step("release", &proxy);
    let held = a.acquire(&key, &opts).await.unwrap();
    step("reacquire_by_the_client_that_released", &proxy);
    held.release().await.unwrap();
    proxy.reset_counts();
    let b = Client::new(pstore.clone());
    let held = b.acquire(&key, &opts).await.unwrap();
    step("takeover_of_a_released_lease_fresh_client", &proxy);
    held.release().await.unwrap();
    let key2 = unique("counts-create");
    let c = Client::new(pstore.clone());
    proxy.reset_counts();
    let held = c.acquire(&key2, &opts).await.unwrap();
    step("acquire_new_key_fresh_client_again", &proxy);
    // A waiter polling a record that does not change (the holder renews every 10 s; the
    // waiter gives up after 5 s, polling every 500 ms).
    let w = Client::new(pstore.clone());
    proxy.reset_counts();
    let waited = w
        .acquire(
            &key2,
            &LeaseOptions::default()
                .wait(Duration::from_secs(5))
                .poll_interval(Duration::from_millis(500)),
        )
        .await;
    assert!(waited.is_err(), "the waiter should not get a held lease");
    step("waiter_5s_poll_500ms_unchanged_record", &proxy);
    held.release().await.unwrap();
    // Fenced writes (issue 7): the first by a holder reads the object's epoch, then writes
    // conditionally; later ones by the same holder know the version they wrote.
    let data = unique("fenced-data");
    let held = a.acquire(&key, &opts).await.unwrap();
    proxy.reset_counts();
    held.fenced_put(&data, "one").await.unwrap();
    step("fenced_put_new_object", &proxy);
    held.fenced_put(&data, "two").await.unwrap();
    step("fenced_put_version_known", &proxy);
    held.release().await.unwrap();
    let held = b.acquire(&key, &opts).await.unwrap();
    proxy.reset_counts();
    held.fenced_put(&data, "three").await.unwrap();
    step("fenced_put_by_a_newer_holder", &proxy);
    held.release().await.unwrap();
    // Preemption (issue 23): a live holder's lease taken at once, by a fresh client, then
    // back by the first holder's client (which read the record before).
    let preempt = opts.clone().preempt(Preempt::EveryEffectFenced);
    let key3 = unique("counts-preempt");
    let victim = a.acquire(&key3, &opts).await.unwrap();
    let p = Client::new(pstore.clone());
    proxy.reset_counts();
    let taken = p.acquire(&key3, &preempt).await.unwrap();
    step("preempt_a_live_lease_fresh_client", &proxy);
    let _ = victim.release().await; // lost to the preemption: nothing to release
    proxy.reset_counts();
    let back = a.acquire(&key3, &preempt).await.unwrap();
    step("preempt_a_live_lease_client_that_held_it", &proxy);
    let _ = taken.release().await;
    back.release().await.unwrap();
    // And a queued lock's live grant (docs/protocol.md §10, "Preemption of a queued lock"), by
    // a fresh client: its session's create, the record's read, the preempting write.
    let queued = opts.clone().queue();
    let key4 = unique("counts-preempt-queued");
    let qvictim = a.acquire(&key4, &queued).await.unwrap();
    let q = Client::new(pstore.clone());
    proxy.reset_counts();
    let qtaken = q.acquire(&key4, &preempt.clone().queue()).await.unwrap();
    step("preempt_a_queued_lock_fresh_client", &proxy);
    let _ = qvictim.release().await; // lost to the preemption
    qtaken.release().await.unwrap();
    proxy.reset_counts();

    // 2. Latency, straight to the server.
    let (store, s3) = open(url);
    let sdk = s3.sdk_client().await.unwrap();
    let body = vec![b'x'; 330]; // about the size of a lease record
    let bare_key = unique("bare-put");
    // Interleaved, so that load on the machine drifts over every series alike: each round
    // makes one bare PUT, one bare conditional PUT, one GET, then acquire, two fenced writes,
    // renew, release.
    let mut etag = sdk
        .put_object()
        .bucket(s3.bucket())
        .key(&bare_key)
        .body(body.clone().into())
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string();
    let client = Client::new(store.clone());
    let key = unique("latency");
    let held = client.acquire(&key, &opts).await.unwrap();
    held.release().await.unwrap();
    let (mut bare, mut bare_cond, mut bare_get) = (vec![], vec![], vec![]);
    let (mut acq, mut ren, mut rel, mut fresh) = (vec![], vec![], vec![], vec![]);
    let (mut fenced_first, mut fenced_known) = (vec![], vec![]);
    let fenced_key = unique("fenced-latency");
    let (preemptor, preempt_key, mut preempting) = (
        Client::new(store.clone()),
        unique("preempt-latency"),
        vec![],
    );
    let (queued, qpreempt) = (opts.clone().queue(), preempt.clone().queue());
    let (qpreempt_key, mut qpreempting) = (unique("preempt-queued-latency"), vec![]);
    for round in 0..iterations + iterations / 10 {
        let warm = round < iterations / 10;
        let t = Instant::now();
        sdk.put_object()
            .bucket(s3.bucket())
            .key(&bare_key)
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
        let d_bare = t.elapsed();
        // The bare PUT changed the ETag: read it (timed as the bare GET).
        let t = Instant::now();
        let out = sdk
            .get_object()
            .bucket(s3.bucket())
            .key(&bare_key)
            .send()
            .await
            .unwrap();
        etag = out.e_tag().unwrap_or(&etag).to_string();
        out.body.collect().await.unwrap();
        let d_get = t.elapsed();
        let t = Instant::now();
        sdk.put_object()
            .bucket(s3.bucket())
            .key(&bare_key)
            .if_match(&etag)
            .body(body.clone().into())
            .send()
            .await
            .unwrap();
        let d_cond = t.elapsed();
        let t = Instant::now();
        let held = client.acquire(&key, &opts).await.unwrap();
        let d_acq = t.elapsed();
        // A new lease each round: its first fenced write reads the object (GET + PUT), the
        // next knows the version it wrote (1 PUT).
        let t = Instant::now();
        held.fenced_put(&fenced_key, body.clone()).await.unwrap();
        let d_fenced_first = t.elapsed();
        let t = Instant::now();
        held.fenced_put(&fenced_key, body.clone()).await.unwrap();
        let d_fenced_known = t.elapsed();
        let t = Instant::now();
        held.renew().await.unwrap();
        let d_ren = t.elapsed();
        let t = Instant::now();
        held.release().await.unwrap();
        let d_rel = t.elapsed();
        // A live holder, preempted (timed) from another client.
        let victim = client.acquire(&preempt_key, &opts).await.unwrap();
        let t = Instant::now();
        let taken = preemptor.acquire(&preempt_key, &preempt).await.unwrap();
        let d_preempt = t.elapsed();
        let _ = victim.release().await;
        taken.release().await.unwrap();
        // A live queued grant, preempted (timed) from another client.
        let victim = client.acquire(&qpreempt_key, &queued).await.unwrap();
        let t = Instant::now();
        let taken = preemptor.acquire(&qpreempt_key, &qpreempt).await.unwrap();
        let d_qpreempt = t.elapsed();
        let _ = victim.release().await;
        taken.release().await.unwrap();
        if !warm {
            preempting.push(d_preempt);
            qpreempting.push(d_qpreempt);
            bare.push(d_bare);
            bare_get.push(d_get);
            bare_cond.push(d_cond);
            acq.push(d_acq);
            ren.push(d_ren);
            rel.push(d_rel);
            fenced_first.push(d_fenced_first);
            fenced_known.push(d_fenced_known);
        }
    }
    for i in 0..iterations.min(100) {
        let c = Client::new(store.clone());
        let k = format!("{key}-fresh-{i}");
        let t = Instant::now();
        let held = c.acquire(&k, &opts).await.unwrap();
        fresh.push(t.elapsed());
        held.release().await.unwrap();
    }
    let timing = opts.timing(&store.capabilities()).expect("valid options");
    let live_takeover = timing.ttl + timing.grace_for(timing.ttl);
    let bare_m = median(bare.clone());
    let cond_m = median(bare_cond.clone());
    let ratio =
        |a: Duration, b: Duration| (a.as_secs_f64() / b.as_secs_f64() * 100.0).round() / 100.0;
    let lat = |v: &Vec<Duration>| {
        let m = median(v.clone());
        json!({ "median_ms": ms(m), "ratio_to_bare_put": ratio(m, bare_m),
                "ratio_to_bare_conditional_put": ratio(m, cond_m) })
    };
    let latency = json!({
        "iterations": iterations,
        "bare_put": { "median_ms": ms(bare_m) },
        "bare_conditional_put (If-Match)": { "median_ms": ms(cond_m) },
        "bare_get": { "median_ms": ms(median(bare_get)) },
        "acquire_by_the_client_that_released (1 PUT)": lat(&acq),
        "renew (1 PUT)": lat(&ren),
        "release (1 PUT)": lat(&rel),
        "acquire_new_key_fresh_client (GET + PUT)": lat(&fresh),
        "fenced_put_version_known (1 PUT)": lat(&fenced_known),
        "fenced_put_first_by_this_holder (GET + PUT)": lat(&fenced_first),
        "preempt_a_live_lease (GET + PUT)": lat(&preempting),
        "preempt_a_queued_lock (session GET + PUT, record GET + PUT)": lat(&qpreempting),
        // What a takeover of a live lease waits without preemption, at the least: the ttl and
        // its grace (the defaults, 30 s and 3 s), against the preemption's median.
        "takeover_of_a_live_lease_ttl_plus_grace": {
            "ms": ms(live_takeover),
            "ratio_to_preempt": ratio(live_takeover, median(preempting.clone())),
        },
    });

    // 3. An hour at the default ttl, sampled.
    let holder_proxy = FaultProxy::start(upstream).await.unwrap();
    let waiter_proxy = FaultProxy::start(upstream).await.unwrap();
    let (hstore, _) = open(&holder_proxy.store_url(url));
    let (wstore, _) = open(&waiter_proxy.store_url(url));
    let key = unique("hour");
    let holder = Client::new(hstore);
    let held = holder
        .acquire(&key, &LeaseOptions::default())
        .await
        .unwrap();
    holder_proxy.reset_counts();
    let waiter = Client::new(wstore);
    let waited = waiter
        .acquire(&key, &LeaseOptions::default().wait(sample))
        .await;
    assert!(waited.is_err());
    let hc = holder_proxy.counts();
    let wc = waiter_proxy.counts();
    held.release().await.unwrap();
    let scale = 3600.0 / sample.as_secs_f64();
    let per_hour = |n: u64| (n as f64 * scale).round();
    // S3 Standard list prices (us-east-1): PUT $0.005 and GET $0.0004 per 1000 requests.
    let holder_puts_h = per_hour(hc.puts());
    let waiter_gets_h = per_hour(wc.gets());
    let hour = json!({
        "sample_secs": sample.as_secs(),
        "ttl_s": 30, "renew_s": 10, "poll_s": 2,
        "holder": { "sampled": summary(&hc), "puts_per_hour": holder_puts_h,
                    "usd_per_hour": holder_puts_h * 0.005 / 1000.0 },
        "waiter": { "sampled": summary(&wc), "gets_per_hour": waiter_gets_h,
                    "not_modified_304_per_hour": per_hour(wc.status(304)),
                    "usd_per_hour": waiter_gets_h * 0.0004 / 1000.0 },
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "store": url, "requests_per_operation": counts, "latency": latency, "one_hour": hour,
        }))
        .unwrap()
    );
}
