//! The store-clock rule behind a gateway whose `Date` is not the store's clock (issue 29), in
//! simulated time: the memory store behind a wrapper that answers with its own `Date`
//! (`ahead` of the store's clock, as nginx's `Date` is its own) and passes `Last-Modified`
//! through. The full drivers run: the acquirer's `Stamp` step writes the probe object.

#![allow(clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use lease::clock::Rng;
use lease::store::memory::MemoryStore;
use lease::store::{Capabilities, Cond, Delete, Get, GetOptions, Meta, Put, Store, Version};
use lease::{Client, ErrorKind, LeaseOptions};

use crate::sim;
use sim::*;

/// A front end whose `Date` runs `ahead` of the store's clock.
#[derive(Debug)]
struct Gateway {
    store: MemoryStore,
    ahead: Duration,
}

impl Gateway {
    fn date(&self, t: Option<SystemTime>) -> Option<SystemTime> {
        t.map(|t| t + self.ahead)
    }
}

#[async_trait]
impl Store for Gateway {
    fn url(&self) -> &str {
        "gateway://"
    }
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }
    async fn get(&self, key: &str, opts: GetOptions<'_>) -> lease::Result<Get> {
        Ok(match self.store.get(key, opts).await? {
            Get::Found(mut o) => {
                o.server_now = self.date(o.server_now);
                Get::Found(o)
            }
            Get::NotModified { server_now } => Get::NotModified {
                server_now: self.date(server_now),
            },
            Get::NotFound { server_now } => Get::NotFound {
                server_now: self.date(server_now),
            },
        })
    }
    async fn put(&self, key: &str, bytes: Bytes, cond: Cond, meta: &Meta) -> lease::Result<Put> {
        self.store.put(key, bytes, cond, meta).await
    }
    async fn delete(&self, key: &str, v: &Version) -> lease::Result<Delete> {
        self.store.delete(key, v).await
    }
}

fn behind_gateway(w: &World, ahead: Duration, seed: u64) -> (Client, MemoryStore) {
    let conn = w.store.connection();
    let store = Arc::new(Gateway {
        store: conn.clone(),
        ahead,
    });
    let client = Client::builder(store)
        .clock(w.clock.clone())
        .rng(Rng::seeded(seed))
        .identity("waiter", seed as u32)
        .build();
    (client, conn)
}

#[tokio::test(start_paused = true)]
async fn a_waiter_behind_a_gateway_ahead_does_not_take_a_live_lease() {
    let w = World::new();
    let (holder, _) = w.client("holder", 1);
    let held = holder.acquire("job", &opts()).await.unwrap();
    let (waiter, conn) = behind_gateway(&w, Duration::from_secs(30), 2);
    // The gateway's Date says the record is 30 s old (ttl 10 s): ask the store's stamp.
    for _ in 0..5 {
        let e = waiter.try_acquire("job", &opts()).await.unwrap();
        assert!(e.is_none(), "took a live lease through the gateway");
        sleep(secs(2.0)).await;
    }
    assert!(held.is_held());
    // The probe object, beside the lease, is the only other object written.
    assert!(matches!(
        conn.get("job.clock", GetOptions::default()).await.unwrap(),
        Get::Found(_)
    ));
    // A waiting acquire goes by stamps and the observation rule: it gets the lease only
    // after the holder releases it.
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire("job", &opts().wait(secs(60.0))).await })
    };
    sleep(secs(30.0)).await;
    assert!(!waiting.is_finished() && held.is_held());
    held.release().await.unwrap();
    let got = waiting.await.unwrap().unwrap();
    assert!(got.epoch() > held.epoch());
}

#[tokio::test(start_paused = true)]
async fn a_fresh_process_behind_a_gateway_ahead_takes_a_dead_lease_at_once() {
    let w = World::new();
    let (holder, hconn) = w.client("holder", 1);
    let held = holder.acquire("job", &opts()).await.unwrap();
    // The holder's connection goes dead: its renewals stop.
    hconn.faults().set_unavailable(true);
    sleep(TTL + GRACE + RESOLUTION + secs(0.5)).await;
    let (waiter, conn) = behind_gateway(&w, Duration::from_secs(30), 2);
    conn.reset_stats();
    let got = waiter.try_acquire("job", &opts()).await.unwrap();
    let got = got.expect("a dead lease was not taken at once");
    assert!(got.epoch() > held.epoch());
    // GET the record; GET, PUT, GET the probe; PUT the takeover.
    let stats = conn.stats();
    assert_eq!((stats.gets, stats.puts), (3, 2), "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn an_honest_date_costs_one_probe_and_no_time() {
    let w = World::new();
    let (holder, hconn) = w.client("holder", 1);
    let held = holder.acquire("job", &opts()).await.unwrap();
    hconn.faults().set_unavailable(true);
    let (waiter, _) = behind_gateway(&w, Duration::ZERO, 2);
    let start = w.now();
    let got = waiter
        .acquire("job", &opts().wait(secs(60.0)))
        .await
        .unwrap();
    // As soon as the store-clock rule allows (the store's 1 ms resolution).
    let took = w.now() - start;
    assert!(took <= TTL + GRACE + secs(0.1), "{took:?}");
    assert!(got.epoch() > held.epoch());
}

#[tokio::test(start_paused = true)]
async fn a_probe_object_that_holds_something_else_is_left_alone() {
    let w = World::new();
    let (holder, hconn) = w.client("holder", 1);
    let held = holder.acquire("job", &opts()).await.unwrap();
    hconn.faults().set_unavailable(true);
    let conn = w.store.connection();
    conn.put(
        "job.clock",
        Bytes::from_static(b"mine"),
        Cond::Create,
        &Meta::new(),
    )
    .await
    .unwrap();
    sleep(TTL + GRACE + secs(1.0)).await;
    let (waiter, _) = behind_gateway(&w, Duration::ZERO, 2);
    // The store-clock rule cannot be confirmed: -n fails Held, the object is untouched...
    let e = waiter
        .acquire("job", &LeaseOptions::new(TTL).wait(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Held, "{e}");
    match conn.get("job.clock", GetOptions::default()).await.unwrap() {
        Get::Found(o) => assert_eq!(o.bytes.as_deref(), Some(&b"mine"[..])),
        other => panic!("{other:?}"),
    }
    // ... and a waiter takes over by its own observation, ttl + grace after it first looked.
    let got = waiter
        .acquire("job", &opts().wait(secs(60.0)))
        .await
        .unwrap();
    assert!(got.epoch() > held.epoch());
}
