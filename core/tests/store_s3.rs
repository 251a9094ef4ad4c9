#![cfg(feature = "s3")]
//! The conformance suite and the protocol on real S3 servers: moto and MinIO on 127.0.0.1,
//! started by `scripts/s3-servers.sh start`, whose env file names them
//! (`LEASE_TEST_S3_MOTO`, `LEASE_TEST_S3_MINIO`). Under CI moto is mandatory: without it every
//! test here fails. Outside CI, a missing server is reported loudly and the test returns.
//!
//! What the servers get wrong, found here:
//! - MinIO (2026-02) ignores `If-Match` on DeleteObject: a stale conditional delete deletes.
//!   The store does not claim conditional deletes on custom endpoints unless the URL says
//!   `conditional_delete=true` (the moto URL does; moto honours it).
//! - moto never answers 409 ConditionalRequestConflict (real S3 can): the fault-injection
//!   tests in tests/ answer it from a proxy.

mod conformance;
mod remote;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use lease::clock::{Clock, SystemClock};
use lease::store::{DynStore, Get, GetOptions};
use lease::{Client, ErrorKind, LeaseOptions, StoreUrl};

/// The configured servers: `(name, store URL)`.
fn servers() -> Vec<(&'static str, String)> {
    let mut out = vec![];
    for (name, var) in [
        ("moto", "LEASE_TEST_S3_MOTO"),
        ("minio", "LEASE_TEST_S3_MINIO"),
    ] {
        match std::env::var(var) {
            Ok(url) if !url.is_empty() => out.push((name, url)),
            _ => {}
        }
    }
    let in_ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    if !out.iter().any(|(n, _)| *n == "moto") {
        assert!(
            !in_ci,
            "CI=true but LEASE_TEST_S3_MOTO is not set: run `scripts/s3-servers.sh start` and \
             source its env file before the S3 tests"
        );
        eprintln!(
            "\n!!! SKIPPED: no S3 test server (LEASE_TEST_S3_MOTO unset). Run \
             `scripts/s3-servers.sh start` and source .cache/s3-servers/env to test S3. !!!\n"
        );
        return vec![];
    }
    if let Ok(why) = std::env::var("LEASE_TEST_S3_MINIO_SKIPPED") {
        eprintln!("\n!!! MinIO NOT TESTED: {why} !!!\n");
    }
    assert_eq!(
        std::env::var("AWS_EC2_METADATA_DISABLED").as_deref(),
        Ok("true"),
        "source the env file of scripts/s3-servers.sh: it disables the instance metadata \
         service, so no test ever asks 169.254.169.254 for credentials"
    );
    out
}

/// A new store (and SDK client) for `url`. Not `StoreUrl::open`, which shares one store per
/// URL in the process: each `#[tokio::test]` has its own runtime, and pooled connections must
/// not outlive the runtime that made them.
fn open(url: &str) -> DynStore {
    match StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}")) {
        StoreUrl::S3 { bucket, options } => Arc::new(
            lease::store::s3::S3Store::open(&bucket, &options)
                .unwrap_or_else(|e| panic!("{url}: {e}")),
        ),
        other => panic!("not an S3 URL: {other}"),
    }
}

/// A prefix no other run uses.
fn unique(what: &str) -> String {
    let t = SystemClock
        .wall()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{what}-{}-{t}", std::process::id())
}

fn endpoint_of(url: &str) -> String {
    url.split(['?', '&'])
        .find_map(|p| p.strip_prefix("endpoint="))
        .expect("test URLs name their endpoint")
        .to_string()
}

macro_rules! suite {
    ($($name:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn $name() {
            for (server, url) in servers() {
                eprintln!("{} on {server}", stringify!($name));
                let prefix = unique(concat!("conformance/", stringify!($name)));
                conformance::$name(open(&url), &prefix).await;
            }
        }
    )*};
}

conformance::every_case!(suite);

#[tokio::test]
async fn polling_reads_carry_the_store_clock() {
    for (server, url) in servers() {
        let store = open(&url);
        let key = format!("{}/clock", unique("s3"));
        let missing = store.get(&key, GetOptions::default()).await.unwrap();
        assert!(
            matches!(
                missing,
                Get::NotFound {
                    server_now: Some(_)
                }
            ),
            "{server}: {missing:?}"
        );
        let v = match store
            .put(
                &key,
                "x".into(),
                lease::store::Cond::Create,
                &Default::default(),
            )
            .await
            .unwrap()
        {
            lease::store::Put::Written {
                version,
                server_now,
            } => {
                assert!(server_now.is_some(), "{server}: a write reports the Date");
                version
            }
            other => panic!("{server}: {other:?}"),
        };
        let g = store
            .get(
                &key,
                GetOptions {
                    if_none_match: Some(&v),
                    max_len: Some(10),
                },
            )
            .await
            .unwrap();
        assert!(
            matches!(
                g,
                Get::NotModified {
                    server_now: Some(_)
                }
            ),
            "{server}: {g:?}"
        );
    }
}

#[tokio::test]
async fn conditional_delete_capability_is_truthful() {
    // The capability each test URL claims matches what the server does with a stale delete.
    for (server, url) in servers() {
        let store = open(&url);
        let key = format!("{}/stale-delete", unique("s3"));
        let put = |body: &'static str, cond| {
            let store = store.clone();
            let key = key.clone();
            async move {
                match store
                    .put(&key, body.into(), cond, &Default::default())
                    .await
                    .unwrap()
                {
                    lease::store::Put::Written { version, .. } => version,
                    other => panic!("{other:?}"),
                }
            }
        };
        let v1 = put("one", lease::store::Cond::Create).await;
        let _v2 = put("two", lease::store::Cond::Match(v1.clone())).await;
        let stale = store.delete(&key, &v1).await.unwrap();
        let honoured = matches!(stale, lease::store::Delete::ConditionFailed);
        eprintln!("{server}: a stale conditional delete was {stale:?}");
        assert_eq!(
            store.capabilities().conditional_delete,
            honoured,
            "{server}: the store claims conditional_delete={} but the server {} If-Match on \
             DeleteObject",
            store.capabilities().conditional_delete,
            if honoured { "honours" } else { "ignores" }
        );
    }
}

#[tokio::test]
async fn missing_bucket_is_a_store_error_naming_it() {
    for (server, url) in servers() {
        let other = url.replacen("s3://lease-test", "s3://no-such-bucket-lease", 1);
        let store = open(&other);
        let e = store
            .get("some/key", GetOptions::default())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{server}: {e}");
        let m = e.to_string();
        assert!(
            m.contains("no-such-bucket-lease") && m.contains("some/key"),
            "{server}: {m}"
        );
        assert!(m.contains(&endpoint_of(&url)), "{server}: {m}");
        let e = store
            .put(
                "some/key",
                "x".into(),
                lease::store::Cond::Create,
                &Default::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Store, "{server}: {e}");
    }
}

#[tokio::test]
async fn closed_port_is_unavailable_naming_the_endpoint() {
    if servers().is_empty() {
        return;
    }
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!(
        "s3://lease-test?endpoint=http://127.0.0.1:{port}&region=us-east-1&connect_timeout=2s"
    );
    let store = open(&url);
    let e = store.get("k", GetOptions::default()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
}

#[test]
fn bad_options_are_invalid_errors_naming_the_option() {
    for (url, needle) in [
        ("s3://bucket/k?colour=blue", "colour"),
        ("s3://bucket/k?endpoint=ftp://x", "ftp://x"),
        ("s3://bucket/k?path_style=perhaps", "perhaps"),
        (
            "s3://bucket/k?aws_secret_access_key=s",
            "aws_secret_access_key",
        ),
    ] {
        let e = Client::for_url(url).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Invalid, "{url}: {e}");
        assert!(e.to_string().contains(needle), "{url}: {e}");
    }
}

/// Runs a check in a child process with a different AWS environment (the SDK reads it once
/// per store; a child keeps this process's environment untouched).
fn run_child(mode: &str, envs: &[(&str, &str)], remove: &[&str]) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_check", "--ignored", "--nocapture"])
        .env("LEASE_TEST_CHILD_MODE", mode);
    for var in remove {
        cmd.env_remove(var);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child check {mode} failed:\n{text}");
    assert!(
        text.contains("1 passed"),
        "child check {mode} ran no test:\n{text}"
    );
}

const CREDENTIAL_VARS: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_ROLE_ARN",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];

#[test]
fn no_credentials_is_a_store_error() {
    for (_, url) in servers() {
        // IMDS stays disabled (AWS_EC2_METADATA_DISABLED=true from the env file) and the config
        // files are /dev/null, so the chain has nowhere left to look.
        run_child(
            "nocreds",
            &[("LEASE_TEST_CHILD_URL", &url)],
            CREDENTIAL_VARS,
        );
    }
}

#[test]
fn wrong_credentials_are_a_store_error() {
    // moto accepts any signature; MinIO checks them.
    for (server, url) in servers() {
        if server != "minio" {
            continue;
        }
        run_child(
            "badcreds",
            &[
                ("LEASE_TEST_CHILD_URL", &url),
                ("AWS_ACCESS_KEY_ID", "not-a-key"),
                ("AWS_SECRET_ACCESS_KEY", "not-a-secret"),
            ],
            &[],
        );
    }
}

#[test]
fn endpoint_from_the_environment() {
    for (_, url) in servers() {
        // The same server, named only by AWS_ENDPOINT_URL_S3; path style follows from it.
        let endpoint = endpoint_of(&url);
        run_child(
            "envendpoint",
            &[
                ("LEASE_TEST_CHILD_URL", "s3://lease-test"),
                ("AWS_ENDPOINT_URL_S3", &endpoint),
            ],
            &[],
        );
    }
}

#[tokio::test]
#[ignore = "run in a child process by the tests above"]
async fn child_check() {
    let mode = std::env::var("LEASE_TEST_CHILD_MODE").unwrap();
    let url = std::env::var("LEASE_TEST_CHILD_URL").unwrap();
    let store = open(&url);
    let key = format!("{}/child", unique(&mode));
    let result = store.get(&key, GetOptions::default()).await;
    match mode.as_str() {
        "nocreds" => {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
            let m = e.to_string();
            assert!(m.contains("credentials") && m.contains("lease-test"), "{m}");
            assert!(!m.contains('\n'), "messages are one line: {m}");
            assert!(m.contains(&endpoint_of(&url)), "{m}");
            eprintln!("no credentials: {m}");
        }
        "badcreds" => {
            let e = result.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Store, "{e}");
            let m = e.to_string();
            assert!(m.contains("403") && m.contains("lease-test"), "{m}");
            eprintln!("wrong credentials: {m}");
        }
        "envendpoint" => {
            assert!(matches!(result.unwrap(), Get::NotFound { .. }));
            let put = store
                .put(
                    &key,
                    "x".into(),
                    lease::store::Cond::Create,
                    &Default::default(),
                )
                .await
                .unwrap();
            assert!(matches!(put, lease::store::Put::Written { .. }), "{put:?}");
        }
        other => panic!("unknown child mode {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// The protocol on S3.

fn opts(ttl: Duration) -> LeaseOptions {
    LeaseOptions::new(ttl).wait(Duration::from_secs(60))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_and_reacquire() {
    for (server, url) in servers() {
        let store = open(&url);
        let key = format!("{}/cycle", unique("protocol"));
        let a = Client::new(store.clone());
        let b = Client::new(store.clone());
        let ttl = Duration::from_secs(3);
        let held = a.acquire(&key, &opts(ttl)).await.unwrap();
        // A new record starts at the store's clock in milliseconds.
        let first = held.epoch();
        assert!(first > 1_700_000_000_000, "{server}: {first}");
        // Someone else cannot have it.
        let e = b
            .acquire(&key, &opts(ttl).wait(Duration::ZERO))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Held, "{server}: {e}");
        assert_eq!(e.epoch(), Some(first));
        // Renewals land: after three renew intervals the lease is still held and the record's
        // rev has grown, with the same epoch.
        SystemClock.sleep(ttl).await;
        held.ensure_held(Duration::from_millis(100)).unwrap();
        let status = b.status(&key).await.unwrap();
        assert_eq!(status.epoch, Some(first), "{server}: {status:?}");
        let raw = match store.get(&key, GetOptions::default()).await.unwrap() {
            Get::Found(o) => o,
            other => panic!("{other:?}"),
        };
        let rec: serde_json::Value = serde_json::from_slice(raw.bytes.as_ref().unwrap()).unwrap();
        assert!(rec["rev"].as_u64().unwrap() >= 3, "{server}: {rec}");
        assert_eq!(rec["epoch"], first);
        held.release().await.unwrap();
        // A released lease is taken at once, with the next epoch.
        let next = b
            .acquire(&key, &opts(ttl).wait(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(next.epoch(), first + 1, "{server}");
        next.release().await.unwrap();
        // And the client that released it last takes it back with the epoch after that.
        let again = b
            .acquire(&key, &opts(ttl).wait(Duration::ZERO))
            .await
            .unwrap();
        assert_eq!(again.epoch(), first + 2, "{server}");
        again.release().await.unwrap();
    }
}

/// Acquire in a runtime of its own, then stop that runtime without releasing: a holder that
/// crashed. Returns the epoch it held.
fn crashed_holder(store: DynStore, key: &str, ttl: Duration) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = Client::new(store);
    let held = rt.block_on(client.acquire(key, &opts(ttl))).unwrap();
    let epoch = held.epoch();
    std::mem::forget(held);
    rt.shutdown_background();
    epoch
}

#[test]
fn a_waiter_takes_over_after_a_crash_and_not_before_the_deadline() {
    for (server, url) in servers() {
        let store = open(&url);
        let key = format!("{}/crash", unique("protocol"));
        let ttl = Duration::from_secs(2);
        let clock = SystemClock;
        let before = clock.now();
        let dead_epoch = crashed_holder(open(&url), &key, ttl);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let taken = rt.block_on(async {
            let waiter = Client::new(store.clone());
            let held = waiter.acquire(&key, &opts(ttl)).await.unwrap();
            let at = clock.now();
            held.release().await.unwrap();
            (held.epoch(), at)
        });
        assert!(taken.0 > dead_epoch, "{server}: epochs must increase");
        // Safety: the dead holder believed it held the lease until (at most) ttl after it
        // sent its write, which was after `before`; nobody may take over before that.
        assert!(
            taken.1 - before >= ttl,
            "{server}: taken over {:?} after the crashed holder started",
            taken.1 - before
        );
    }
}

#[test]
fn a_fresh_process_takes_over_a_long_dead_lease_at_once() {
    // The store-clock rule: Date - Last-Modified > ttl + grace + 1 s from one response.
    for (server, url) in servers() {
        let store = open(&url);
        let key = format!("{}/long-dead", unique("protocol"));
        let ttl = Duration::from_millis(500);
        let dead_epoch = crashed_holder(open(&url), &key, ttl);
        // ttl + grace (1 s) + resolution (1 s), plus a second for whole-second dates.
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(SystemClock.sleep(Duration::from_millis(3_600)));
        let fresh = Client::new(store.clone());
        let held = rt
            .block_on(fresh.acquire(&key, &opts(ttl).wait(Duration::ZERO)))
            .unwrap_or_else(|e| panic!("{server}: {e}"));
        assert!(held.epoch() > dead_epoch);
        rt.block_on(held.release()).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_one_lease_on_s3() {
    // Eight clients in one process, each with its own store connection (as in separate
    // processes), contend; the history of who held the lease when must show no overlap and
    // increasing epochs.
    for (server, url) in servers() {
        let key = format!("{}/contended", unique("protocol"));
        remote::many_clients_one_lease(server, || open(&url), &key, 4, Duration::from_secs(5))
            .await;
    }
}

#[tokio::test]
async fn doctor_accepts_real_servers() {
    for (server, url) in servers() {
        let store = open(&url);
        let report = lease::doctor::check(&store, &unique("doctor"))
            .await
            .unwrap_or_else(|e| panic!("{server}: {e}"));
        let json = report.to_json();
        eprintln!("{server}: {json:#}");
        assert_eq!(json["ok"], true, "{server}");
        assert_eq!(json["cleaned_up"], true, "{server}: {json}");
        assert_eq!(
            json["conditional_delete"]["honoured"],
            server == "moto",
            "{server}: {json}"
        );
        // The probe is gone.
        let key = json["probe_key"].as_str().unwrap();
        assert!(matches!(
            store.get(key, GetOptions::default()).await.unwrap(),
            Get::NotFound { .. }
        ));
    }
}
