//! The Rust baseline of the C ABI call benchmark (ffi/bench/run.py): `Lease::epoch` and
//! `Lease::remaining` called directly on the core, in the same loop as ffi/bench/bench.c.
//! (The acquire/release cycle's baseline is tests/src/bin/cycle-bench.rs.)
//!
//! `calls_bench LEASE_URL CALLS` prints `{"epoch_ns": …, "remaining_ns": …}`.

use std::hint::black_box;
use std::time::Duration;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: calls_bench LEASE_URL CALLS");
        std::process::exit(64);
    }
    let calls: u64 = args[2].parse().expect("CALLS is a number");
    let (client, key) = lease_core::Client::for_url(&args[1]).expect("a lease URL");
    let opts = lease_core::LeaseOptions::new(Duration::from_secs(30)).wait(Duration::from_secs(10));
    let held = client.acquire(&key, &opts).await.expect("acquire");
    #[allow(clippy::disallowed_methods)] // a benchmark measures real time
    let t = std::time::Instant::now;
    let mut sum = 0u64;
    let t0 = t();
    for _ in 0..calls {
        sum = sum.wrapping_add(black_box(&held).epoch());
    }
    let epoch_ns = t0.elapsed().as_nanos() as f64 / calls as f64;
    let t0 = t();
    for _ in 0..calls {
        sum = sum.wrapping_add(black_box(&held).remaining().as_millis() as u64);
    }
    let remaining_ns = t0.elapsed().as_nanos() as f64 / calls as f64;
    black_box(sum);
    held.release().await.expect("release");
    println!("{{\"epoch_ns\": {epoch_ns:.3}, \"remaining_ns\": {remaining_ns:.3}}}");
}
