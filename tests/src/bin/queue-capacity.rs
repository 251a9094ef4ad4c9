//! A queued lock's capacity (docs/benchmarks.md "Capacity", issue 22): `lease-queue-capacity URL
//! WORKERS PERMITS HOLD_MS` starts WORKERS participants (each its own client, with the largest
//! label and data) that take a semaphore of PERMITS, hold it HOLD_MS and release it, arriving
//! 1 ms apart. It prints one JSON line: the record's size at 10, 100 and 1,000 participants (and
//! its largest), bytes per participant, the time from the first arrival to the last release,
//! grants per second, the most grants at once (must be PERMITS) and whether they went in arrival
//! order.

#![allow(clippy::disallowed_methods)] // a benchmark measures real time

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease::protocol::queue::{classify, Classified};
use lease::store::{Get, GetOptions};
use lease::{Client, LeaseOptions};

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, workers, permits, hold_ms] = &args[..] else {
        eprintln!("usage: lease-queue-capacity URL WORKERS PERMITS HOLD_MS");
        std::process::exit(64);
    };
    let (workers, permits, hold): (usize, u32, u64) = (
        workers.parse().unwrap(),
        permits.parse().unwrap(),
        hold_ms.parse().unwrap(),
    );
    let (probe, key) = Client::for_url(url).expect("url");
    let opts = LeaseOptions::new(Duration::from_secs(30))
        .permits(permits)
        .label("l".repeat(lease::record::MAX_LABEL_LEN))
        .data("d".repeat(lease::record::MAX_DATA_LEN));
    // The record's size by number of participants, sampled while they join.
    let sizes = Arc::new(Mutex::new(std::collections::BTreeMap::new()));
    let sampling = {
        let (probe, key, sizes) = (probe.clone(), key.clone(), sizes.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(Get::Found(o)) = probe.store().get(&key, GetOptions::default()).await {
                    if let Some(Classified::Queue(r)) = o.bytes.as_deref().map(classify) {
                        let n = r.grants.len() + r.queue.len();
                        sizes.lock().unwrap().insert(n, o.size);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let running = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut tasks = vec![];
    for i in 0..workers {
        let (client, _) = Client::for_url(url).expect("url");
        let (key, opts) = (key.clone(), opts.clone());
        let (running, most, order) = (running.clone(), most.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let held = client.acquire(&key, &opts).await.expect("acquire");
            order.lock().unwrap().push(i);
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            held.release().await.expect("release");
        }));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for t in tasks {
        t.await.unwrap();
    }
    let took = start.elapsed();
    sampling.abort();
    let sizes = sizes.lock().unwrap().clone();
    let at = |n: usize| sizes.range(..=n).next_back().map(|(k, v)| (*k, *v));
    let order = order.lock().unwrap().clone();
    let in_order =
        order.windows(2).filter(|w| w[0] < w[1]).count() as f64 / (order.len().max(2) - 1) as f64;
    let record_bytes_at: Vec<_> = [10, 100, 1000]
        .iter()
        .filter_map(|&n| at(n))
        .map(|(k, v)| {
            serde_json::json!({"participants": k, "bytes": v, "per_participant": v / k.max(1) as u64})
        })
        .collect();
    let row = serde_json::json!({
        "url": url,
        "workers": workers,
        "permits": permits,
        "hold_ms": hold,
        "record_bytes_at": record_bytes_at,
        "largest_record_bytes": sizes.values().max(),
        "seconds": took.as_secs_f64(),
        "grants_per_s": workers as f64 / took.as_secs_f64(),
        "most_at_once": most.load(Ordering::SeqCst),
        "in_arrival_order": in_order,
    });
    println!("{row}");
}
