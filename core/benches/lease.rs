//! What the lease logic costs on top of the store writes it must make.
//!
//! Each operation is measured beside its floor, the raw conditional store calls it needs with
//! record-sized bodies, on the same store in the same run:
//! - `cycle`: acquire + release of a lease this client released before = 2 conditional PUTs;
//! - `renew`: one renewal = 1 conditional PUT.
//!
//! `bench/report` turns criterion's estimates into the ratio table of docs/benchmarks.md.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use lease::record::{Holder, Record, RecordState, FORMAT};
use lease::store::file::FileStore;
use lease::store::memory::MemoryStore;
use lease::store::{Cond, DynStore, Meta, Put, Version};
use lease::{Client, LeaseOptions};

fn record(rev: u64) -> Bytes {
    Record {
        format: FORMAT,
        epoch: 1,
        rev,
        state: RecordState::Held,
        ttl_ms: 30_000,
        holder: Holder {
            id: "0123456789abcdef0123456789abcdef".into(),
            label: None,
            host: Some("bench-host".into()),
            pid: Some(1234),
            user: Some("bench".into()),
            client: Some("lease 0.1.0 (rust)".into()),
            process: None,
        },
        acquired_at: Some("2026-11-22T10:00:00.123Z".into()),
        renewed_at: Some("2026-11-22T10:00:00.123Z".into()),
        data: None,
        prev: vec![],
        write: Some("0123456789abcdef".into()),
        broken: None,
        preempted: None,
        history: Default::default(),
        attached: None,
    }
    .to_bytes()
}

/// `n` conditional writes in a row on one key, each against the version the last returned.
async fn raw_writes(store: &DynStore, key: &str, version: &mut Version, rev: &mut u64, n: usize) {
    for _ in 0..n {
        *rev += 1;
        match store
            .put(
                key,
                record(*rev),
                Cond::Match(version.clone()),
                &Meta::new(),
            )
            .await
            .unwrap()
        {
            Put::Written { version: v, .. } => *version = v,
            Put::ConditionFailed => panic!("raw write lost its condition"),
        }
    }
}

fn bench_store(c: &mut Criterion, name: &str, store: DynStore) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(store.clone());
    let opts = LeaseOptions::new(Duration::from_secs(30));
    let mut group = c.benchmark_group(name);

    // Floor: a key at some version, then writes against it.
    let (mut version, mut rev) = rt.block_on(async {
        match store
            .put("floor", record(0), Cond::Create, &Meta::new())
            .await
            .unwrap()
        {
            Put::Written { version, .. } => (version, 0u64),
            Put::ConditionFailed => panic!("fresh key"),
        }
    });
    group.bench_function("floor_2_puts", |b| {
        b.iter(|| rt.block_on(raw_writes(&store, "floor", &mut version, &mut rev, 2)))
    });
    group.bench_function("cycle", |b| {
        b.iter(|| {
            rt.block_on(async {
                let held = client.acquire("cycle", &opts).await.unwrap();
                held.release().await.unwrap();
            })
        })
    });
    group.bench_function("floor_1_put", |b| {
        b.iter(|| rt.block_on(raw_writes(&store, "floor", &mut version, &mut rev, 1)))
    });
    let held = rt.block_on(client.acquire("renew", &opts)).unwrap();
    group.bench_function("renew", |b| b.iter(|| rt.block_on(held.renew()).unwrap()));
    rt.block_on(held.release()).unwrap();
    group.finish();
}

fn benches(c: &mut Criterion) {
    bench_store(c, "memory", Arc::new(MemoryStore::new()));
    let dir = tempfile::tempdir().unwrap();
    bench_store(c, "file", Arc::new(FileStore::open(dir.path()).unwrap()));
}

criterion_group! {
    name = lease_benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = benches
}
criterion_main!(lease_benches);
