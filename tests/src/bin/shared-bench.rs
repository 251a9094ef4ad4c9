//! Many queued locks held by one process (docs/benchmarks.md "Shared sessions", issue 24):
//! `lease-shared-bench STORE MODE N TTL_S HOLD_S` takes N queued locks in STORE (a directory for
//! the file store, or a store URL such as `s3://bucket?endpoint=…`) (MODE `shared`: all on one
//! shared session; `per-lock`: each with a session of its own, as before), 256 acquisitions in
//! flight at once, then holds them HOLD_S seconds and prints one JSON line: how long acquiring
//! took, and while holding the CPU share of one core (user + system time over the window), the
//! process's threads and resident memory, and the store writes and reads per second (this
//! process's own request counts, `lease_store_requests_total`, before and after the window).

#![allow(clippy::disallowed_methods)] // a benchmark measures real time

use futures::StreamExt;
use std::time::{Duration, Instant};

use lease::{Client, LeaseOptions, SessionOptions, SharedSession};

fn cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is valid for getrusage to fill.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to our own rusage.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn status_field(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// This process's store requests so far: (writes, reads), from its own metrics.
fn requests() -> (f64, f64) {
    let snapshot = lease::metrics::snapshot();
    let Some(family) = snapshot.family("lease_store_requests_total") else {
        return (0.0, 0.0);
    };
    let (mut writes, mut reads) = (0.0, 0.0);
    for sample in &family.samples {
        let lease::metrics::Value::Number(n) = sample.value else {
            continue;
        };
        match sample.labels.iter().find(|(k, _)| *k == "kind") {
            Some((_, kind)) if kind == "get" => reads += n,
            Some(_) => writes += n,
            None => {}
        }
    }
    (writes, reads)
}

fn main() {
    // Two workers; the file store's blocking calls on at most 16 threads (tokio's default
    // allows 512, which a burst of 256 acquisitions fills and keeps alive): the same for both
    // modes.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(16)
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let args: Vec<String> = std::env::args().collect();
    let [_, store, mode, n, ttl, hold] = &args[..] else {
        eprintln!("usage: lease-shared-bench STORE shared|per-lock N TTL_S HOLD_S");
        std::process::exit(64);
    };
    let n: usize = n.parse().unwrap();
    let ttl = Duration::from_secs(ttl.parse().unwrap());
    let hold = Duration::from_secs(hold.parse().unwrap());
    let store = if store.contains("://") {
        store.clone()
    } else {
        format!("file://{store}")
    };
    let (base, query) = store.split_once('?').unwrap_or((&store, ""));
    let prefix = format!("bench-{}", std::process::id());
    let url = |key: &str| {
        let url = format!("{}/{key}", base.trim_end_matches('/'));
        if query.is_empty() {
            url
        } else {
            format!("{url}?{query}")
        }
    };
    let (client, _) = Client::for_url(&url(&format!("{prefix}/probe"))).unwrap();
    let opts = LeaseOptions::new(ttl)
        .queue()
        .wait(Duration::from_secs(600));
    let session = match mode.as_str() {
        "shared" => Some(
            SharedSession::open(&client, SessionOptions::new(ttl))
                .await
                .unwrap(),
        ),
        "per-lock" => None,
        other => panic!("mode {other}: shared or per-lock"),
    };
    let started = Instant::now();
    // At most 256 acquisitions in flight, and only they exist: a task spawned per lock up
    // front (waiting on a semaphore) held each acquisition's future, about 10 KB, from the
    // start, 100 MB for 10,000 locks, which the allocator kept after the burst
    // (docs/benchmarks.md, "memory after the acquisition burst").
    let held: Vec<Held> = futures::stream::iter(0..n)
        .map(|i| {
            let (client, opts, session) = (&client, &opts, &session);
            let key = format!("{prefix}/locks/{i}");
            async move {
                match session {
                    Some(s) => Held::Shared(Box::new(s.acquire(&key, opts).await.unwrap())),
                    None => Held::Own(client.acquire(&key, opts).await.unwrap()),
                }
            }
        })
        .buffer_unordered(256)
        .collect()
        .await;
    let acquire_s = started.elapsed().as_secs_f64();
    // Settle (the last group commits and confirmations), then the window.
    tokio::time::sleep(ttl / 3).await;
    let (cpu0, (writes0, reads0), t0) = (cpu_seconds(), requests(), Instant::now());
    tokio::time::sleep(hold).await;
    let (cpu1, (writes1, reads1), window) = (cpu_seconds(), requests(), t0.elapsed());
    let per_s = |n: f64| (n / window.as_secs_f64() * 100.0).round() / 100.0;
    let all_held = held.iter().all(Held::is_held);
    let line = serde_json::json!({
        "mode": mode,
        "locks": n,
        "ttl_s": ttl.as_secs(),
        "acquire_s": (acquire_s * 10.0).round() / 10.0,
        "cpu_share": ((cpu1 - cpu0) / window.as_secs_f64() * 1000.0).round() / 1000.0,
        "threads": status_field("Threads:"),
        "rss_mb": status_field("VmRSS:") / 1024,
        "writes_per_s": per_s(writes1 - writes0),
        "reads_per_s": per_s(reads1 - reads0),
        "all_held": all_held,
    });
    println!("{line}");
    std::process::exit(0);
}

enum Held {
    Shared(Box<lease::SharedGrant>),
    Own(lease::Lease),
}

impl Held {
    fn is_held(&self) -> bool {
        match self {
            Held::Shared(g) => g.is_held(),
            Held::Own(l) => l.is_held(),
        }
    }
}
