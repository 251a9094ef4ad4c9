//! The Rust baseline for the bindings' benchmarks: acquire + release cycles on one lease URL.
//!
//! `lease-cycle-bench URL ITERATIONS [WARMUP]` prints one JSON line:
//! `{"url": …, "iterations": N, "ns_per_cycle": …}`. Each binding's benchmark runs this in the
//! same run as its own loop and reports the ratio.

use std::time::Duration;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: lease-cycle-bench URL ITERATIONS [WARMUP]");
        std::process::exit(64);
    }
    let url = &args[1];
    let iterations: u64 = args[2].parse().expect("ITERATIONS is a number");
    let warmup: u64 = args
        .get(3)
        .map_or(iterations / 10, |w| w.parse().expect("WARMUP is a number"));
    let (client, key) = lease::Client::for_url(url).unwrap_or_else(|e| {
        eprintln!("lease-cycle-bench: {e}");
        std::process::exit(64);
    });
    let opts = lease::LeaseOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
    let cycle = || async {
        let held = client.acquire(&key, &opts).await.expect("acquire");
        held.release().await.expect("release");
    };
    for _ in 0..warmup {
        cycle().await;
    }
    #[allow(clippy::disallowed_methods)] // a benchmark measures real time
    let start = std::time::Instant::now();
    for _ in 0..iterations {
        cycle().await;
    }
    let ns = start.elapsed().as_nanos() as f64 / iterations as f64;
    println!(
        "{}",
        serde_json::json!({ "url": url, "iterations": iterations, "ns_per_cycle": ns })
    );
}
