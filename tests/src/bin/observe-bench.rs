//! The cost of metrics and history (issue 25) on an uncontended acquire + release cycle and on
//! a renewal, as ratios against both turned off, in one run: rounds alternate between "on"
//! (the defaults: metrics counted, each tenure appended to the record's history, which a
//! client cycling on one key fills to its 10 entries) and "off" (`metrics::set_enabled(false)`,
//! `LeaseOptions::history(false)`), on the memory and the file store.
//!
//! `lease-observe-bench [ROUNDS] [CYCLES] [STORE]` prints a Markdown table: medians of ROUNDS
//! rounds (default 7) of CYCLES cycles and CYCLES renewals (default 300) each, on both stores or
//! only STORE (`memory` or `file`). A second table splits
//! the cost: metrics alone and history alone, against both off, in the same rounds.

use std::sync::Arc;
use std::time::Duration;

use lease::store::file::FileStore;
use lease::store::memory::MemoryStore;
use lease::store::DynStore;
use lease::{Client, LeaseOptions};

#[allow(clippy::disallowed_methods)] // a benchmark measures real time
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// Nanoseconds per cycle and per renewal with metrics and history `on` or off.
async fn round(client: &Client, key: &str, on: bool, n: u32) -> (f64, f64) {
    round_with(client, key, on, on, n).await
}

/// Nanoseconds per cycle and per renewal with metrics and history each on or off.
async fn round_with(
    client: &Client,
    key: &str,
    metrics: bool,
    history: bool,
    n: u32,
) -> (f64, f64) {
    lease::metrics::set_enabled(metrics);
    let opts = LeaseOptions::new(Duration::from_secs(30)).history(history);
    let start = now();
    for _ in 0..n {
        let held = client.acquire(key, &opts).await.expect("acquire");
        held.release().await.expect("release");
    }
    let cycle = start.elapsed().as_nanos() as f64 / n as f64;
    let held = client.acquire(key, &opts).await.expect("acquire");
    let start = now();
    for _ in 0..n {
        held.renew().await.expect("renew");
    }
    let renew = start.elapsed().as_nanos() as f64 / n as f64;
    held.release().await.expect("release");
    (cycle, renew)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rounds: usize = args.get(1).map_or(7, |a| a.parse().expect("ROUNDS"));
    let cycles: u32 = args.get(2).map_or(300, |a| a.parse().expect("CYCLES"));
    let only = args.get(3);
    let dir = tempfile::tempdir().unwrap();
    let stores: Vec<(&str, DynStore)> = vec![
        ("memory", Arc::new(MemoryStore::new())),
        ("file", Arc::new(FileStore::open(dir.path()).unwrap())),
    ];
    println!("| store | cycle on | cycle off | ratio | renewal on | renewal off | ratio |");
    println!("|---|---|---|---|---|---|---|");
    let mut split = vec![];
    for (name, store) in stores {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        let client = Client::new(store);
        // Warm up both ways (and fill the "on" key's history).
        round(&client, "on", true, cycles).await;
        round(&client, "off", false, cycles).await;
        round_with(&client, "metrics", true, false, cycles).await;
        round_with(&client, "history", false, true, cycles).await;
        let (mut on, mut off) = ((vec![], vec![]), (vec![], vec![]));
        let (mut m, mut h) = ((vec![], vec![]), (vec![], vec![]));
        for _ in 0..rounds {
            let (c, r) = round(&client, "on", true, cycles).await;
            on.0.push(c);
            on.1.push(r);
            let (c, r) = round(&client, "off", false, cycles).await;
            off.0.push(c);
            off.1.push(r);
            let (c, r) = round_with(&client, "metrics", true, false, cycles).await;
            m.0.push(c);
            m.1.push(r);
            let (c, r) = round_with(&client, "history", false, true, cycles).await;
            h.0.push(c);
            h.1.push(r);
        }
        let (con, coff) = (median(on.0), median(off.0));
        let (ron, roff) = (median(on.1), median(off.1));
        println!(
            "| {name} | {:.1} µs | {:.1} µs | {:.3} | {:.1} µs | {:.1} µs | {:.3} |",
            con / 1e3,
            coff / 1e3,
            con / coff,
            ron / 1e3,
            roff / 1e3,
            ron / roff
        );
        let (cm, rm) = (median(m.0), median(m.1));
        let (ch, rh) = (median(h.0), median(h.1));
        split.push(format!(
            "| {name} | {:.3} | {:.3} | {:.3} | {:.3} |",
            cm / coff,
            ch / coff,
            rm / roff,
            rh / roff
        ));
    }
    println!("\n| store | cycle, metrics only | cycle, history only | renewal, metrics only | renewal, history only |");
    println!("|---|---|---|---|---|");
    for line in split {
        println!("{line}");
    }
    lease::metrics::set_enabled(true);
}
