//! What real gateways do that the emulators do not (issue 29, item 1): a reverse proxy in front
//! of a store answers with its own `Date` (nginx does by default; `lease_systests::proxy`'s
//! `set_date_ahead` cites its documentation), here running 30 s ahead, while `Last-Modified` is
//! passed through. `lease run -n` through such a gateway must not run beside a live holder, and
//! must still take a dead holder's lease at once (by the store's own stamp).
//!
//! On moto, fake-gcs-server and Azurite (`scripts/stores.sh`: `LEASE_TEST_S3_MOTO`,
//! `LEASE_TEST_GCS_FAKE`, `LEASE_TEST_AZURE_AZURITE`); under CI each is mandatory.

#![allow(clippy::disallowed_methods)] // real servers in real time

use std::process::Output;
use std::time::Duration;

use lease::{Client, LeaseOptions, StoreUrl};
use lease_systests::proxy::{endpoint_addr, FaultProxy};
use tokio::process::Command;

fn servers() -> Vec<(&'static str, String)> {
    let mut out = vec![];
    for (name, var) in [
        ("moto", "LEASE_TEST_S3_MOTO"),
        ("fake-gcs-server", "LEASE_TEST_GCS_FAKE"),
        ("azurite", "LEASE_TEST_AZURE_AZURITE"),
    ] {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => out.push((name, url)),
            _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("CI=true but {var} is not set: run through scripts/test")
            }
            _ => eprintln!("\n!!! SKIPPED {name}: {var} unset (scripts/stores.sh) !!!\n"),
        }
    }
    out
}

fn lease_url(store_url: &str, key: &str) -> String {
    match store_url.split_once('?') {
        Some((base, query)) => format!("{}/{key}?{query}", base.trim_end_matches('/')),
        None => format!("{}/{key}", store_url.trim_end_matches('/')),
    }
}

fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("clocks/{what}-{}-{t}", std::process::id())
}

async fn lease(args: &[&str]) -> Output {
    let home = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_lease"))
        .args(args)
        .env("LEASE_HOME", home.path())
        .env_remove("LEASE_LOG")
        .output()
        .await
        .unwrap()
}

fn says(out: &Output) -> String {
    format!(
        "exit {:?}; stdout {}; stderr {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A front end whose `Date` runs 30 s ahead of the store.
async fn gateway(url: &str) -> (FaultProxy, String) {
    let proxy = FaultProxy::start(endpoint_addr(url).unwrap())
        .await
        .unwrap();
    proxy.set_date_ahead(Some(Duration::from_secs(30)));
    let through = proxy.store_url(url);
    (proxy, through)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_run_n_through_a_gateway_whose_date_runs_ahead_does_not_take_a_live_lease() {
    for (name, url) in servers() {
        let (proxy, through) = gateway(&url).await;
        let key = unique("live");
        // The holder talks to the store directly: ttl 20 s, renewed every ~6.7 s.
        let client = Client::new(StoreUrl::parse(&url).unwrap().open().unwrap());
        let held = client
            .acquire(&key, &LeaseOptions::new(Duration::from_secs(20)))
            .await
            .unwrap();
        let epoch = held.epoch();
        for attempt in 0..3 {
            let out = lease(&["run", "-n", &lease_url(&through, &key), "--", "true"]).await;
            assert_eq!(
                out.status.code(),
                Some(75),
                "{name}, attempt {attempt}: ran beside a live holder: {}",
                says(&out)
            );
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains("proxy_pass_header Date;"),
                "{name}: the gateway is not named: {stderr}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(held.is_held(), "{name}: the holder lost its lease");
        assert_eq!(held.epoch(), epoch);
        held.release().await.unwrap();
        // The client wrote the probe object once per attempt (a read of it, a write, a read).
        let counts = proxy.counts();
        assert!(counts.writes() >= 3, "{name}: {counts:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_run_n_through_a_gateway_whose_date_runs_ahead_takes_a_dead_lease_at_once() {
    for (name, url) in servers() {
        let (proxy, through) = gateway(&url).await;
        let key = unique("dead");
        // A holder (ttl 3 s) killed without releasing.
        let mut holder = Command::new(env!("CARGO_BIN_EXE_lease"))
            .args([
                "run",
                "--ttl",
                "3s",
                &lease_url(&url, &key),
                "--",
                "sleep",
                "60",
            ])
            .env_remove("LEASE_LOG")
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let status = StoreUrl::parse(&url).unwrap().open().unwrap();
        let client = Client::new(status);
        // Until its record is there.
        for _ in 0..100 {
            if client.status(&key).await.unwrap().epoch.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        holder.start_kill().unwrap();
        holder.wait().await.unwrap();
        // ttl + grace + resolution (3 + 1 + 1 s) after its last write, plus a second of
        // truncation: the store's own clock says it is dead.
        tokio::time::sleep(Duration::from_secs(6)).await;
        proxy.reset_counts();
        let out = lease(&["run", "-n", &lease_url(&through, &key), "--", "true"]).await;
        assert_eq!(out.status.code(), Some(0), "{name}: {}", says(&out));
        let counts = proxy.counts();
        eprintln!("{name}: a takeover by the store's stamp through the gateway: {counts:?}");
    }
}
