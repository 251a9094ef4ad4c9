//! The grant rate one hot queued lock sustains under a store's per-object limit
//! (docs/benchmarks.md "One hot lock under the stores' write limits", issue 24).
//!
//! ```text
//! lease-hot-lock URL PARTICIPANTS SECONDS [--limit s3|gcs|azure] [--rate PER_S] [--poll-ms MS]
//! ```
//! PARTICIPANTS separate processes (this binary in `worker` mode: no in-process wake-up helps
//! them) contend on one exclusive queued lock at URL for SECONDS: each takes it, releases it at
//! once, and asks again, until the time is up. With `--limit` they reach the store through the
//! test proxy playing that store's per-object limit (`lease_systests::write_limit`; `--rate`
//! overrides the documented rate). Prints one JSON line: grants, grants/s, the throttling
//! replies the proxy sent (503 or 429), the requests by kind, errors the participants saw, and
//! `overlaps`: grants whose holding intervals intersect, checked from the participants' own
//! timestamps (CLOCK_MONOTONIC, shared by every process here; a grant is only made by the
//! release's write, which follows the release's timestamp).

#![allow(clippy::disallowed_methods)] // a benchmark measures real time

use std::process::Command;
use std::time::Duration;

use lease::{Client, LeaseOptions};
use lease_systests::monotonic_ns;
use lease_systests::proxy::{endpoint_addr, FaultProxy};
use lease_systests::write_limit::Limit;

fn usage() -> ! {
    eprintln!(
        "usage: lease-hot-lock URL PARTICIPANTS SECONDS [--limit s3|gcs|azure] [--rate PER_S] \
         [--poll-ms MS]"
    );
    std::process::exit(64)
}

fn options(poll_ms: u64) -> LeaseOptions {
    let mut opts = LeaseOptions::new(Duration::from_secs(30))
        .wait(Duration::from_secs(120))
        .queue();
    opts.poll_interval = Some(Duration::from_millis(poll_ms));
    opts
}

/// `worker URL UNTIL_NS POLL_MS`: take and release the lock until UNTIL_NS; print
/// `held T_ACQUIRED T_RELEASE` per grant and `error WHAT` per failure.
async fn worker(url: &str, until_ns: u64, poll_ms: u64) {
    let (client, key) = Client::for_url(url).expect("url");
    let opts = options(poll_ms);
    while monotonic_ns() < until_ns {
        match client.acquire(&key, &opts).await {
            Ok(held) => {
                let t_acquired = monotonic_ns();
                let t_release = monotonic_ns();
                println!("held {t_acquired} {t_release}");
                if let Err(e) = held.release().await {
                    println!("error release: {e}");
                }
            }
            Err(e) => {
                println!("error acquire: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        let until = args[2].parse().unwrap_or_else(|_| usage());
        let poll = args[3].parse().unwrap_or_else(|_| usage());
        return worker(&args[1], until, poll).await;
    }
    if args.len() < 3 {
        usage()
    }
    let url = args[0].clone();
    let n: usize = args[1].parse().unwrap_or_else(|_| usage());
    let seconds: u64 = args[2].parse().unwrap_or_else(|_| usage());
    let (mut limit, mut rate, mut poll_ms) = (None, None, 250u64);
    let mut i = 3;
    while i < args.len() {
        let value = args.get(i + 1).unwrap_or_else(|| usage());
        match args[i].as_str() {
            "--limit" => limit = Some(Limit::parse(value).unwrap_or_else(|| usage())),
            "--rate" => rate = Some(value.parse::<f64>().unwrap_or_else(|_| usage())),
            "--poll-ms" => poll_ms = value.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
        i += 2;
    }
    let proxy = match endpoint_addr(&url) {
        Some(upstream) => {
            let proxy = FaultProxy::start(upstream).await.expect("proxy");
            proxy.set_write_limit(limit.map(|l| {
                let r = rate.unwrap_or(l.documented_rate());
                (l, r, r)
            }));
            Some(proxy)
        }
        None => {
            assert!(limit.is_none(), "--limit needs a store URL with endpoint=");
            None
        }
    };
    let worker_url = proxy.as_ref().map_or(url.clone(), |p| p.store_url(&url));
    let t0 = monotonic_ns();
    let until = t0 + seconds * 1_000_000_000;
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..n)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "worker",
                    &worker_url,
                    &until.to_string(),
                    &poll_ms.to_string(),
                ])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().expect("a worker's output"))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let t_end = monotonic_ns();
    let mut held: Vec<(u64, u64)> = vec![];
    let mut errors: Vec<String> = vec![];
    for out in &outputs {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let mut w = line.split_whitespace();
            match w.next() {
                Some("held") => {
                    let a = w.next().and_then(|x| x.parse().ok()).unwrap();
                    let b = w.next().and_then(|x| x.parse().ok()).unwrap();
                    held.push((a, b));
                }
                _ => errors.push(line.to_string()),
            }
        }
    }
    held.sort();
    let overlaps = held.windows(2).filter(|w| w[1].0 < w[0].1).count();
    // The rate over the time grants were being made: first grant to last.
    let span_s = match (held.first(), held.last()) {
        (Some(f), Some(l)) if l.0 > f.0 => (l.0 - f.0) as f64 / 1e9,
        _ => (t_end - t0) as f64 / 1e9,
    };
    let counts = proxy.as_ref().map(|p| p.counts());
    println!(
        "{}",
        serde_json::json!({
            "url": url, "participants": n, "seconds": seconds, "poll_ms": poll_ms,
            "limit": limit.map(|l| format!("{l:?}")),
            "rate": limit.map(|l| rate.unwrap_or(l.documented_rate())),
            "grants": held.len(),
            "grants_per_s": (held.len().saturating_sub(1)) as f64 / span_s,
            "throttled": proxy.as_ref().map_or(0, |p| p.throttled()),
            "requests": counts.as_ref().map(|c| c.requests.clone()),
            "statuses": counts.as_ref().map(|c| c.statuses.clone()),
            "errors": errors,
            "overlaps": overlaps,
            "wall_s": (t_end - t0) as f64 / 1e9,
        })
    );
}
