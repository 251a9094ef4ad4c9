//! The fault-injection proxy as a program, for trying a client against faults by hand.
//!
//! ```text
//! s3-fault-proxy UPSTREAM_HOST:PORT [--seed N] [--p500 P] [--p503 P] [--p409 P]
//!                [--drop P] [--land412 P] [--delay P --delay-ms MS]
//!                [--limit s3|gcs|azure [--limit-rate PER_S] [--limit-burst N]]
//! ```
//! `--limit` plays that store's per-object request limit (`lease_systests::write_limit`: S3
//! 503 `SlowDown` beyond 15 writes/s on one key, GCS 429 beyond 1 write/s per object name,
//! Azure 503 `ServerBusy` beyond 500 requests/s per blob; `--limit-rate` sets another rate,
//! `--limit-burst` the burst, by default one second's worth).
//! Prints `http://127.0.0.1:PORT` (use it as the store's `endpoint=`), then runs until
//! interrupted and prints the request counts as JSON.

use std::time::Duration;

use lease_systests::proxy::{Fault, FaultProxy, RandomFaults};
use lease_systests::write_limit::Limit;

fn usage() -> ! {
    eprintln!(
        "usage: s3-fault-proxy UPSTREAM_HOST:PORT [--seed N] [--p500 P] [--p503 P] [--p409 P] \
         [--drop P] [--land412 P] [--delay P --delay-ms MS] \
         [--limit s3|gcs|azure [--limit-rate PER_S] [--limit-burst N]]"
    );
    std::process::exit(64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let upstream = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| usage());
    let mut seed = 1u64;
    let mut delay_ms = 1000u64;
    let mut probs: Vec<(&str, f64)> = vec![];
    let mut limit: Option<Limit> = None;
    let (mut limit_rate, mut limit_burst): (Option<f64>, Option<f64>) = (None, None);
    let mut i = 1;
    while i < args.len() {
        let value = args.get(i + 1).unwrap_or_else(|| usage());
        match args[i].as_str() {
            "--seed" => seed = value.parse().unwrap_or_else(|_| usage()),
            "--delay-ms" => delay_ms = value.parse().unwrap_or_else(|_| usage()),
            "--limit" => limit = Some(Limit::parse(value).unwrap_or_else(|| usage())),
            "--limit-rate" => limit_rate = Some(value.parse().unwrap_or_else(|_| usage())),
            "--limit-burst" => limit_burst = Some(value.parse().unwrap_or_else(|_| usage())),
            flag @ ("--p500" | "--p503" | "--p409" | "--drop" | "--land412" | "--delay") => {
                probs.push((flag, value.parse().unwrap_or_else(|_| usage())))
            }
            _ => usage(),
        }
        i += 2;
    }
    let faults = probs
        .into_iter()
        .map(|(flag, p)| {
            let fault = match flag {
                "--p500" => Fault::INTERNAL_ERROR,
                "--p503" => Fault::SLOW_DOWN,
                "--p409" => Fault::CONFLICT,
                "--drop" => Fault::DropReply,
                "--land412" => Fault::LandThen412,
                _ => Fault::Delay(Duration::from_millis(delay_ms)),
            };
            (fault, p)
        })
        .collect();
    let proxy = FaultProxy::start(upstream).await.unwrap_or_else(|e| {
        eprintln!("s3-fault-proxy: {e}");
        std::process::exit(1)
    });
    proxy.set_random(Some(RandomFaults { seed, faults }));
    proxy.set_write_limit(limit.map(|l| {
        let rate = limit_rate.unwrap_or(l.documented_rate());
        (l, rate, limit_burst.unwrap_or(rate))
    }));
    println!("{}", proxy.endpoint());
    let _ = tokio::signal::ctrl_c().await;
    let c = proxy.counts();
    println!(
        "{}",
        serde_json::json!({ "requests": c.requests, "statuses": c.statuses, "faults": c.faults,
                            "throttled": proxy.throttled() })
    );
}
