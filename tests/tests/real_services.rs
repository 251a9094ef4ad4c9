//! What the real GCS and Azure services do that fake-gcs-server and Azurite do not (issue 29,
//! items 4 and 5), played by small interceptors in the fault proxy (`lease_systests::proxy`),
//! each citing the documented behaviour it plays, in front of the emulators of
//! `scripts/stores.sh` (`LEASE_TEST_GCS_FAKE`, `LEASE_TEST_AZURE_AZURITE`; under CI each is
//! mandatory).

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lease::store::{Cond, DynStore, Get, GetOptions, Meta, Put};
use lease::{Client, LeaseOptions, StoreUrl};
use lease_systests::proxy::{endpoint_addr, reply, FaultProxy, Intercept, Request};

fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
            panic!("CI=true but {var} is not set: run through scripts/test")
        }
        _ => {
            eprintln!("\n!!! SKIPPED: {var} unset (scripts/stores.sh) !!!\n");
            None
        }
    }
}

fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("real/{what}-{}-{t}", std::process::id())
}

fn open(url: &str) -> DynStore {
    StoreUrl::parse(url).unwrap().open_new().unwrap()
}

/// The proxy in front of the server of `url`, playing `intercept`; the store through it.
async fn fixture(url: &str, intercept: Intercept) -> (FaultProxy, DynStore) {
    let proxy = FaultProxy::start(endpoint_addr(url).unwrap()).await.unwrap();
    proxy.set_intercept(Some(intercept));
    let store = open(&proxy.store_url(url));
    (proxy, store)
}

// ---------------------------------------------------------------------------------------------
// Item 5: a GCS poll of an object with no live generation.

/// Real GCS evaluates `ifGenerationNotMatch` against the object, and a precondition that cannot
/// hold is answered `412 Precondition Failed` (cloud.google.com/storage/docs/request-preconditions:
/// "If the precondition check fails, the request fails with a 412 Precondition Failed" — a GET
/// whose `ifGenerationNotMatch` matches is `304 Not Modified`). For an object with no live
/// generation the service may answer 412 where fake-gcs-server, which ignores the parameter,
/// answers 404. This plays the 412.
fn gcs_poll_of_missing_is_412() -> Intercept {
    Arc::new(|req: &Request, upstream: Option<u16>| {
        let poll = req.method == "GET" && req.target.contains("ifGenerationNotMatch=");
        (poll && upstream == Some(404)).then(|| {
            reply(
                412,
                "application/json",
                &[],
                r#"{"error":{"code":412,"message":"At least one of the pre-conditions you specified did not hold.","errors":[{"reason":"conditionNotMet"}]}}"#,
            )
        })
    })
}

#[tokio::test]
async fn a_gcs_poll_of_a_deleted_object_answered_412_reads_as_absent() {
    let Some(url) = server("LEASE_TEST_GCS_FAKE") else {
        return;
    };
    let (_proxy, store) = fixture(&url, gcs_poll_of_missing_is_412()).await;
    let key = unique("poll-412");
    let body = Bytes::from_static(b"{}");
    let Put::Written { version, .. } = store
        .put(&key, body, Cond::Create, &Meta::new())
        .await
        .unwrap()
    else {
        panic!("create failed")
    };
    store.delete(&key, &version).await.unwrap();
    let opts = GetOptions {
        if_none_match: Some(&version),
        max_len: None,
    };
    match store.get(&key, opts).await {
        Ok(Get::NotFound { .. }) => {}
        other => panic!("a poll of a deleted object: {other:?}"),
    }
}

#[tokio::test]
async fn a_gcs_waiter_goes_on_when_the_record_it_polls_is_deleted() {
    let Some(url) = server("LEASE_TEST_GCS_FAKE") else {
        return;
    };
    let (_proxy, store) = fixture(&url, gcs_poll_of_missing_is_412()).await;
    let key = unique("waiter-412");
    let direct = Client::new(open(&url));
    let held = direct
        .acquire(&key, &LeaseOptions::new(Duration::from_secs(30)))
        .await
        .unwrap();
    let waiter = Client::new(store);
    let opts = LeaseOptions::new(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(200))
        .wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { waiter.acquire(&key, &opts).await });
    // Deleted by hand (or a lifecycle rule) while the waiter polls it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let raw = open(&url);
    let key = held.key().to_string();
    if let Ok(Get::Found(o)) = raw.get(&key, GetOptions::default()).await {
        raw.delete(&key, &o.version).await.unwrap();
    }
    let got = waiting.await.unwrap();
    let got = got.unwrap_or_else(|e| panic!("the waiter gave up: {e} ({:?})", e.kind()));
    assert!(got.epoch() > held.epoch());
}
