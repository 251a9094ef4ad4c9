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
use lease_systests::server;

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
    let proxy = FaultProxy::start(endpoint_addr(url).unwrap())
        .await
        .unwrap();
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

// ---------------------------------------------------------------------------------------------
// Item 4: Azure's answer to a request whose date is too far from the service's clock.

/// Azure Storage refuses a request whose `x-ms-date` is more than 15 minutes from the service's
/// clock: 403 `AuthenticationFailed`, the reason in `<AuthenticationErrorDetail>` ("Request date
/// header too old: …"; learn.microsoft.com/rest/api/storageservices/authorize-with-shared-key:
/// "The storage services ensure that a request is no older than 15 minutes by the time it
/// reaches the service"). Azurite does not check `x-ms-date`. This plays a service whose clock
/// runs 20 minutes ahead of this machine's.
fn azure_checks_the_request_date() -> Intercept {
    Arc::new(|req: &Request, upstream: Option<u16>| {
        if upstream.is_some() {
            return None;
        }
        let service_now = std::time::SystemTime::now() + Duration::from_secs(20 * 60);
        let date = req
            .header("x-ms-date")
            .or_else(|| req.header("date"))
            .and_then(|d| httpdate::parse_http_date(d).ok())?;
        let skew = service_now
            .duration_since(date)
            .unwrap_or_else(|e| e.duration());
        (skew > Duration::from_secs(15 * 60)).then(|| {
            let body = format!(
                "\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
                 <Message>Server failed to authenticate the request. Make sure the value of \
                 Authorization header is formed correctly including the signature.\n\
                 RequestId:00000000-0000-0000-0000-000000000000\nTime:{}</Message>\
                 <AuthenticationErrorDetail>Request date header too old: '{}'</AuthenticationErrorDetail></Error>",
                httpdate::fmt_http_date(service_now),
                req.header("x-ms-date").unwrap_or_default()
            );
            reply(
                403,
                "application/xml",
                &[("x-ms-error-code", "AuthenticationFailed")],
                &body,
            )
        })
    })
}

#[tokio::test]
async fn an_azure_request_date_too_far_from_the_service_says_fix_the_clock() {
    let Some(url) = server("LEASE_TEST_AZURE_AZURITE") else {
        return;
    };
    let (_proxy, store) = fixture(&url, azure_checks_the_request_date()).await;
    let e = store
        .get(&unique("skew"), GetOptions::default())
        .await
        .unwrap_err();
    let message = e.to_string();
    assert_eq!(e.kind(), lease::ErrorKind::Store, "{message}");
    assert!(
        message.contains("Request date header too old") && message.contains("clock"),
        "{message}"
    );
    assert!(
        !message.contains("check the"),
        "points at credentials: {message}"
    );
}

// ---------------------------------------------------------------------------------------------
// Item 4: a GCS bucket whose objects cannot be overwritten.

/// A bucket with a default event-based hold: every new object is held, and "while an object
/// has a hold, it cannot be deleted or replaced" (cloud.google.com/storage/docs/object-holds;
/// a retention policy likewise, cloud.google.com/storage/docs/bucket-lock). GCS answers 403
/// "Object 'B/K' is under active Event-Based hold and cannot be deleted, overwritten or
/// archived until hold is removed." (the text gsutil users report). fake-gcs-server has no
/// holds. This plays one: objects created through it are held.
fn gcs_default_event_based_hold() -> Intercept {
    let held = Arc::new(std::sync::Mutex::new(
        std::collections::HashSet::<String>::new(),
    ));
    Arc::new(move |req: &Request, upstream: Option<u16>| {
        let name = if req.method == "POST" && req.target.contains("uploadType=multipart") {
            // The object's name is in the multipart body's JSON part.
            let body = String::from_utf8_lossy(&req.body);
            let start = body.find("\"name\":\"")? + "\"name\":\"".len();
            let end = body[start..].find('"')? + start;
            body[start..end].to_string()
        } else if req.method == "DELETE" {
            let path = req.target.split('?').next()?;
            let encoded = path.rsplit_once("/o/")?.1;
            percent_decode(encoded)
        } else {
            return None;
        };
        let creating = req.target.contains("ifGenerationMatch=0");
        match upstream {
            Some(200) if creating => {
                held.lock().unwrap().insert(name);
                None
            }
            None if !creating && held.lock().unwrap().contains(&name) => {
                let message = format!(
                    "Object 'lease-test/{name}' is under active Event-Based hold and cannot be \
                     deleted, overwritten or archived until hold is removed."
                );
                let body = serde_json::json!({"error": {"code": 403, "message": message,
                    "errors": [{"message": message, "domain": "global", "reason": "forbidden"}]}});
                Some(reply(403, "application/json", &[], &body.to_string()))
            }
            _ => None,
        }
    })
}

fn percent_decode(s: &str) -> String {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn a_gcs_object_under_a_hold_says_so_not_check_iam() {
    let Some(url) = server("LEASE_TEST_GCS_FAKE") else {
        return;
    };
    let (_proxy, store) = fixture(&url, gcs_default_event_based_hold()).await;
    let key = unique("held");
    let Put::Written { version, .. } = store
        .put(&key, Bytes::from_static(b"{}"), Cond::Create, &Meta::new())
        .await
        .unwrap()
    else {
        panic!("create failed")
    };
    let e = store
        .put(
            &key,
            Bytes::from_static(b"{ }"),
            Cond::Match(version),
            &Meta::new(),
        )
        .await
        .unwrap_err();
    let message = e.to_string();
    assert_eq!(e.kind(), lease::ErrorKind::Store, "{message}");
    assert!(
        message.contains("hold") && message.contains("cannot be overwritten"),
        "{message}"
    );
    assert!(
        !message.contains("roles/storage"),
        "points at IAM: {message}"
    );
}

#[tokio::test]
async fn the_doctor_finds_a_gcs_bucket_whose_objects_cannot_be_overwritten() {
    let Some(url) = server("LEASE_TEST_GCS_FAKE") else {
        return;
    };
    let (_proxy, store) = fixture(&url, gcs_default_event_based_hold()).await;
    let report = lease::doctor::inspect(&store, &format!("{}/", unique("doctor")))
        .await
        .unwrap_or_else(|e| panic!("the doctor gave up instead of reporting: {e}"));
    let failed: Vec<&str> = report.failures().iter().map(|c| c.name).collect();
    assert_eq!(failed.first(), Some(&"update"), "{}", report.verdict());
    assert!(
        report.verdict().contains("cannot be overwritten"),
        "{}",
        report.verdict()
    );
}
